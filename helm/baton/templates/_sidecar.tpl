{{/*
baton.sidecar: the Baton proxy for an application pod, as one list item (a
container). The application calls http://127.0.0.1:7878; the proxy keeps no state
and no disk, sends each request to the leader (learned from GET /v1/cluster) and
fails over between the voters on its own.

This file is self-contained (it uses nothing else from the chart and no .Values):
an application chart can either add this chart as a dependency (with
`templatesOnly: true` if it should install no voters) or copy this file into its
own templates/.

Native sidecar (Kubernetes >= 1.29): an init container with restartPolicy:
Always. It starts before the application containers (which wait for its
startupProbe) and stops after them.

  spec:
    initContainers:
      {{- include "baton.sidecar" (dict "native" true "fullname" "baton" "namespace" "baton" "replicas" 3) | nindent 6 }}
    containers:
      - name: app
        ...

Plain container (any version; the application must retry until the proxy
listens, and the proxy may stop before the application does):

  spec:
    containers:
      - name: app
        ...
      {{- include "baton.sidecar" (dict "native" false "fullname" "baton" "namespace" "baton" "replicas" 3) | nindent 6 }}

Parameters (dict keys):
  native          true: init container with restartPolicy Always; false: plain container (default false)
  fullname        the Baton release's fullname, i.e. its client Service's name (default "baton")
  namespace       the Baton release's namespace (required unless urls is given)
  replicas        number of voters (default 3)
  clusterDomain   default "cluster.local"
  scheme          "http" (default) or "https" (once the Baton release has tls.enabled)
  caFile          with "https": path, inside the pod, of the CA of the voters'
                  certificates (mount it yourself, e.g. from the TLS Secret's ca.crt);
                  passed as --tls-peer-ca
  urls            list of voter client URLs; replaces the ones computed from the above
  image           default "ghcr.io/baton-dev/baton:0.1.0" (the chart's appVersion)
  imagePullPolicy default "IfNotPresent"
  name            container name (default "baton-proxy")
  port            local port the application calls (default 7878)
  readinessPath   path the readiness probe asks through the proxy: "/readyz" (default;
                  the pod is not Ready while the Baton cluster has no leader) or
                  "/healthz" (the proxy itself only)
  resources       container resources (default: requests 10m CPU / 32Mi, limit 128Mi)
  extraArgs       more `baton serve` flags (list of strings)
  extraEnv        more environment variables (list of EnvVar objects)
  volumeMounts    volume mounts of the proxy container (e.g. the CA of caFile)

Probes run `baton probe URL` in the container (exit 0 on a 2xx answer): the proxy
listens on 127.0.0.1 only, which the kubelet's httpGet probes cannot reach.
*/}}
{{- define "baton.sidecar" -}}
{{- $p := . -}}
{{- $native := default false $p.native -}}
{{- $fullname := default "baton" $p.fullname -}}
{{- $replicas := int (default 3 $p.replicas) -}}
{{- $domain := default "cluster.local" $p.clusterDomain -}}
{{- $scheme := default "http" $p.scheme -}}
{{- $port := int (default 7878 $p.port) -}}
{{- $image := default "ghcr.io/baton-dev/baton:0.1.0" $p.image -}}
{{- $readinessPath := default "/readyz" $p.readinessPath -}}
{{- $urls := list -}}
{{- if $p.urls -}}
{{- $urls = $p.urls -}}
{{- else -}}
{{- $namespace := required "baton.sidecar: pass \"namespace\" (the Baton release's namespace) or \"urls\"" $p.namespace -}}
{{- range $i := until $replicas -}}
{{- $urls = append $urls (printf "%s://%s-%d.%s-headless.%s.svc.%s:7878" $scheme $fullname $i $fullname $namespace $domain) -}}
{{- end -}}
{{- end -}}
{{- $local := printf "http://127.0.0.1:%d" $port -}}
- name: {{ default "baton-proxy" $p.name }}
  image: {{ $image }}
  imagePullPolicy: {{ default "IfNotPresent" $p.imagePullPolicy }}
  {{- if $native }}
  restartPolicy: Always
  {{- end }}
  command:
    - /usr/local/bin/baton
  args:
    - serve
    - --proxy={{ join "," $urls }}
    - --listen=127.0.0.1:{{ $port }}
    {{- with $p.caFile }}
    - --tls-peer-ca={{ . }}
    {{- end }}
    {{- range $p.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  {{- with $p.extraEnv }}
  env:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $p.volumeMounts }}
  volumeMounts:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  startupProbe:
    exec:
      command: ["/usr/local/bin/baton", "probe", "{{ $local }}/healthz"]
    periodSeconds: 1
    timeoutSeconds: 3
    failureThreshold: 30
  livenessProbe:
    exec:
      command: ["/usr/local/bin/baton", "probe", "{{ $local }}/healthz"]
    periodSeconds: 10
    timeoutSeconds: 3
    failureThreshold: 3
  readinessProbe:
    exec:
      command: ["/usr/local/bin/baton", "probe", "{{ $local }}{{ $readinessPath }}"]
    periodSeconds: 5
    timeoutSeconds: 3
    failureThreshold: 2
  resources:
    {{- if $p.resources }}
    {{- toYaml $p.resources | nindent 4 }}
    {{- else }}
    requests:
      cpu: 10m
      memory: 32Mi
    limits:
      memory: 128Mi
    {{- end }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 10001
    runAsGroup: 10001
    readOnlyRootFilesystem: true
    allowPrivilegeEscalation: false
    capabilities:
      drop:
        - ALL
    seccompProfile:
      type: RuntimeDefault
{{- end }}
