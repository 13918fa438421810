{{/*
Names. The fullname is cut to 52 characters: the StatefulSet's pods add "-<i>",
its headless Service "-headless" and its controller-revision-hash label a hash,
all of which must stay within 63.
*/}}
{{- define "baton.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 52 | trimSuffix "-" }}
{{- end }}

{{- define "baton.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "baton.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every resource. */}}
{{- define "baton.labels" -}}
helm.sh/chart: {{ include "baton.chart" . }}
{{ include "baton.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: baton
{{- end }}

{{- define "baton.selectorLabels" -}}
app.kubernetes.io/name: {{ include "baton.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The voter pods' labels (the StatefulSet's selector). */}}
{{- define "baton.voterSelectorLabels" -}}
{{ include "baton.selectorLabels" . }}
app.kubernetes.io/component: voter
{{- end }}

{{- define "baton.headlessName" -}}
{{- printf "%s-headless" (include "baton.fullname" .) }}
{{- end }}

{{/* The client Service: same name as the release's fullname. */}}
{{- define "baton.clientServiceName" -}}
{{- include "baton.fullname" . }}
{{- end }}

{{- define "baton.clusterSecretName" -}}
{{- if .Values.clusterSecret.existingSecret }}
{{- .Values.clusterSecret.existingSecret }}
{{- else }}
{{- printf "%s-cluster-secret" (include "baton.fullname" .) }}
{{- end }}
{{- end }}

{{/* The Secret holding the auth file: auth.existingSecret, or <fullname>-auth
created from auth.file. */}}
{{- define "baton.authSecretName" -}}
{{- if .Values.auth.existingSecret }}
{{- .Values.auth.existingSecret }}
{{- else }}
{{- printf "%s-auth" (include "baton.fullname" .) }}
{{- end }}
{{- end }}

{{- define "baton.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* http, or https once TLS is enabled. */}}
{{- define "baton.scheme" -}}
{{- if .Values.tls.enabled }}https{{ else }}http{{ end }}
{{- end }}

{{/* The ports inside the pod (the binary's defaults, bound on 0.0.0.0). */}}
{{- define "baton.apiPort" -}}7878{{- end }}
{{- define "baton.raftPort" -}}7879{{- end }}

{{/* "<headless>.<namespace>.svc.<clusterDomain>": what follows a pod's name in its FQDN. */}}
{{- define "baton.podDomain" -}}
{{- printf "%s.%s.svc.%s" (include "baton.headlessName" .) .Release.Namespace .Values.clusterDomain }}
{{- end }}

{{/* --peers: 1=<scheme>://<fullname>-0.<podDomain>:7879,2=... (node id = ordinal + 1). */}}
{{- define "baton.peers" -}}
{{- $fullname := include "baton.fullname" . }}
{{- $domain := include "baton.podDomain" . }}
{{- $scheme := include "baton.scheme" . }}
{{- $port := include "baton.raftPort" . }}
{{- $peers := list }}
{{- range $i := until (int .Values.replicas) }}
{{- $peers = append $peers (printf "%d=%s://%s-%d.%s:%s" (add $i 1) $scheme $fullname $i $domain $port) }}
{{- end }}
{{- join "," $peers }}
{{- end }}

{{/* The parameters of baton.sidecar for a pod of this release (the sidecar example). */}}
{{- define "baton.sidecarParams" -}}
fullname: {{ include "baton.fullname" . | quote }}
namespace: {{ .Release.Namespace | quote }}
replicas: {{ int .Values.replicas }}
clusterDomain: {{ .Values.clusterDomain | quote }}
scheme: {{ include "baton.scheme" . | quote }}
image: {{ include "baton.image" . | quote }}
imagePullPolicy: {{ .Values.image.pullPolicy | quote }}
{{- if .Values.tls.enabled }}
caFile: /etc/baton/ca/ca.crt
volumeMounts:
  - name: baton-ca
    mountPath: /etc/baton/ca
    readOnly: true
{{- end }}
{{- end }}

{{/* Checks of combinations the schema cannot express. */}}
{{- define "baton.validate" -}}
{{- $grace := int .Values.terminationGracePeriodSeconds }}
{{- $shutdown := int .Values.shutdownTimeoutSeconds }}
{{- if lt $grace (add $shutdown 5) }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must be at least shutdownTimeoutSeconds (%d) + 5: a stopping leader finishes in-flight requests, then hands leadership over" $grace $shutdown) }}
{{- end }}
{{- $replicas := int .Values.replicas }}
{{- if and .Values.podDisruptionBudget.enabled (gt $replicas 1) }}
{{- $tolerated := div (sub $replicas 1) 2 }}
{{- if gt (int .Values.podDisruptionBudget.maxUnavailable) $tolerated }}
{{- fail (printf "podDisruptionBudget.maxUnavailable (%d) would let a drain take the majority of %d voters (at most %d)" (int .Values.podDisruptionBudget.maxUnavailable) $replicas $tolerated) }}
{{- end }}
{{- end }}
{{- if and .Values.tls.enabled (not .Values.tls.existingSecret) }}
{{- fail "tls.enabled needs tls.existingSecret" }}
{{- end }}
{{- include "baton.validateAuth" . }}
{{- end }}

{{/* Auth combinations: a setting that looks like auth is on while it is off, or
one that would break the probes, the helm test or the scrape, is refused. */}}
{{- define "baton.validateAuth" -}}
{{- $auth := .Values.auth }}
{{- $file := $auth.file | default dict }}
{{- if not $auth.enabled }}
{{- if or $auth.existingSecret $file }}
{{- fail "auth.existingSecret or auth.file is set but auth.enabled is false: the voters would run without authentication. Set auth.enabled=true, or remove them" }}
{{- end }}
{{- else }}
{{- if and $auth.existingSecret $file }}
{{- fail "auth: set either auth.existingSecret (your Secret) or auth.file (the chart creates the Secret), not both" }}
{{- end }}
{{- if not (or $auth.existingSecret $file.principals) }}
{{- fail "auth.enabled needs auth.existingSecret (a Secret holding the auth file) or auth.file with at least one principal" }}
{{- end }}
{{- $endpoints := $file.endpoints | default dict }}
{{- if eq (toString ($endpoints.health | default "open")) "admin" }}
{{- fail "auth.file.endpoints.health: admin would make the kubelet's probes (which carry no token) fail with 401 and the voters never Ready; keep health open (the default) and restrict the port with networkPolicy" }}
{{- end }}
{{- if and .Values.tests.enabled (not .Values.tests.tokenSecret.name) }}
{{- fail "auth.enabled with tests.enabled needs tests.tokenSecret.name: a Secret whose key holds a client token allowed lock names starting with \"helm-test-\" (or set tests.enabled=false)" }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled $file (not .Values.serviceMonitor.bearerTokenSecret.name) (ne (toString ($endpoints.metrics | default "admin")) "open") }}
{{- fail "auth.enabled with serviceMonitor.enabled: /metrics needs an admin token; set serviceMonitor.bearerTokenSecret.name, or endpoints.metrics: open in auth.file" }}
{{- end }}
{{- end }}
{{- end }}
