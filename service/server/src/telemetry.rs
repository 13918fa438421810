//! Logs and traces of `baton serve`: the log formatter (`--log-format text` or
//! `json`) and, when an OTLP endpoint is configured by the standard `OTEL_*`
//! variables, the OpenTelemetry layer that exports trace spans over OTLP/HTTP
//! (protobuf).
//!
//! Trace spans have the target `baton_trace` (see `baton_raft::trace_context`).
//! The log formatter never takes them, and with no endpoint set no OpenTelemetry
//! layer is installed at all, so nothing wants those spans and each costs one
//! cached callsite check. With an endpoint, the OpenTelemetry layer takes only
//! that target (not the libraries' own spans and events).

use baton_raft::trace_context::{self, RootSampler};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::format::{Format, Json, JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::otlp_transport::{system_bundle, ExportTransport};

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable text (the default).
    Text,
    /// One JSON object per line; a line logged inside a traced request has
    /// its `trace_id`.
    Json,
}

/// Where and how to export traces, read from the `OTEL_*` variables.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSettings {
    /// `OTEL_SERVICE_NAME` (default `baton`).
    pub service_name: String,
    /// `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`, applied at the
    /// roots of traces (see `baton_raft::trace_context::root_sampled`).
    pub sampler: RootSampler,
    /// The collector connection: trust roots, client certificate, timeout.
    pub transport: ExportTransport,
}

/// Reads the trace settings from `var` (the process environment in
/// production): `Ok(None)` when tracing is off, which it is unless
/// `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set
/// (and `OTEL_SDK_DISABLED` is not `true`, and `OTEL_TRACES_EXPORTER` is not
/// `none`). A value Baton cannot honour is an error, so a misconfigured node
/// fails at start instead of silently exporting nothing: the only protocol is
/// `http/protobuf` (no gRPC in this build).
pub fn trace_settings(
    var: impl Fn(&str) -> Option<String>,
) -> Result<Option<TraceSettings>, String> {
    let var = |name: &str| {
        var(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    for name in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Some(protocol) = var(name) {
            if protocol != "http/protobuf" {
                return Err(format!(
                    "{name}={protocol} is not supported: Baton exports traces over OTLP/HTTP \
                     with protobuf only; set it to http/protobuf (or unset it) and point \
                     OTEL_EXPORTER_OTLP_ENDPOINT at the collector's HTTP port (usually 4318)"
                ));
            }
        }
    }
    match var("OTEL_TRACES_EXPORTER").as_deref() {
        None | Some("otlp") => {}
        Some("none") => return Ok(None),
        Some(other) => {
            return Err(format!(
                "OTEL_TRACES_EXPORTER={other} is not supported (otlp or none)"
            ))
        }
    }
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    if var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none()
        && var("OTEL_EXPORTER_OTLP_ENDPOINT").is_none()
    {
        return Ok(None);
    }
    let ratio = || -> Result<f64, String> {
        match var("OTEL_TRACES_SAMPLER_ARG") {
            None => Ok(1.0),
            Some(arg) => match arg.parse::<f64>() {
                Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(ratio),
                _ => Err(format!(
                    "OTEL_TRACES_SAMPLER_ARG={arg} is not a ratio between 0 and 1"
                )),
            },
        }
    };
    let sampler = match var("OTEL_TRACES_SAMPLER").as_deref() {
        None | Some("parentbased_always_on") => RootSampler::ParentAlwaysOn,
        Some("always_on") => RootSampler::AlwaysOn,
        Some("always_off") => RootSampler::AlwaysOff,
        Some("traceidratio") => RootSampler::Ratio(ratio()?),
        Some("parentbased_always_off") => RootSampler::ParentAlwaysOff,
        Some("parentbased_traceidratio") => RootSampler::ParentRatio(ratio()?),
        Some(other) => {
            return Err(format!(
                "OTEL_TRACES_SAMPLER={other} is not supported (always_on, always_off, \
                 traceidratio, parentbased_always_on, parentbased_always_off, \
                 parentbased_traceidratio)"
            ))
        }
    };
    Ok(Some(TraceSettings {
        service_name: var("OTEL_SERVICE_NAME").unwrap_or_else(|| "baton".to_owned()),
        sampler,
        transport: ExportTransport::from_vars(var)?,
    }))
}

/// The installed exporter, flushed by [`Telemetry::shutdown`].
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Exports what is still buffered and stops the exporter (on SIGTERM,
    /// after the API has stopped, so the last requests' spans are sent).
    pub async fn shutdown(self) {
        let Some(provider) = self.provider else {
            return;
        };
        // Blocks until the batch is sent (or the exporter's timeout passes).
        let flushed = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(error)) = flushed {
            eprintln!("baton: exporting the last trace spans failed: {error}");
        }
    }
}

/// Installs the log formatter and, with `traces`, the OTLP exporter.
/// `instance` names this process in the traces' resource
/// (`service.instance.id`); `node_id` is added as `baton.node_id` for a node.
pub fn init(
    format: LogFormat,
    traces: Option<TraceSettings>,
    instance: &str,
    node_id: Option<u64>,
) -> anyhow::Result<Telemetry> {
    let filter = EnvFilter::try_from_env("BATON_LOG")
        .unwrap_or_else(|_| EnvFilter::new("info,openraft=warn"))
        // Trace spans are for the exporter, never for log lines.
        .add_directive("baton_trace=off".parse()?);
    // Colours for a terminal only: a log file or a collector gets plain text.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let Some(traces) = traces else {
        // No exporter: the subscriber as it was before tracing existed.
        match format {
            LogFormat::Text => tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_target(false)
                .with_ansi(colour)
                .init(),
            LogFormat::Json => tracing_subscriber::fmt()
                .fmt_fields(JsonFields::new())
                .event_format(JsonWithTraceId::new())
                .with_env_filter(filter)
                .init(),
        }
        return Ok(Telemetry { provider: None });
    };
    trace_context::set_root_sampler(traces.sampler);
    let provider = tracer_provider(&traces, instance, node_id)?;
    let tracer = provider.tracer("baton");
    opentelemetry::global::set_tracer_provider(provider.clone());
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let otel = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_tracked_inactivity(false)
        .with_threads(false)
        .with_location(false)
        .with_level(false)
        .with_target(false)
        .with_filter(Targets::new().with_target("baton_trace", tracing::Level::TRACE));
    let logs = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_target(false)
            .with_ansi(colour)
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .fmt_fields(JsonFields::new())
            .event_format(JsonWithTraceId::new())
            .with_filter(filter)
            .boxed(),
    };
    tracing_subscriber::registry().with(logs).with(otel).init();
    tracing::info!(
        service = %traces.service_name,
        sampler = ?traces.sampler,
        "exporting traces over OTLP/HTTP"
    );
    Ok(Telemetry {
        provider: Some(provider),
    })
}

/// tracing-subscriber's JSON lines plus `"trace_id"`: the trace of the
/// OpenTelemetry context active where the line is logged. tracing-opentelemetry
/// activates a span's context while the span is entered, so every line logged
/// inside a traced request (and inside the leader's spans serving it) carries
/// the request's trace id, and the log formatter never needs to see the trace
/// spans themselves (it keeps `baton_trace=off`).
struct JsonWithTraceId(Format<Json>);

impl JsonWithTraceId {
    fn new() -> Self {
        JsonWithTraceId(
            tracing_subscriber::fmt::format()
                .json()
                .with_current_span(false)
                .with_span_list(false),
        )
    }
}

impl<S, N> FormatEvent<S, N> for JsonWithTraceId
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        use opentelemetry::trace::TraceContextExt as _;
        let trace_id = opentelemetry::Context::map_current(|cx| {
            let span = cx.span();
            let context = span.span_context();
            context.is_valid().then(|| context.trace_id())
        });
        let Some(trace_id) = trace_id else {
            return self.0.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        // One JSON object and a newline: the id goes in before the last brace.
        if let Some(end) = line.rfind('}') {
            line.insert_str(end, &format!(",\"trace_id\":\"{trace_id}\""));
        }
        writer.write_str(&line)
    }
}

fn tracer_provider(
    traces: &TraceSettings,
    instance: &str,
    node_id: Option<u64>,
) -> anyhow::Result<SdkTracerProvider> {
    // The endpoint and headers come from the OTEL_EXPORTER_OTLP_* variables,
    // read by the exporter itself (the specification's rules); the client
    // that connects (roots, client certificate, timeout) is Baton's.
    let client = traces
        .transport
        .client(system_bundle(|name| std::env::var(name).ok()).as_deref())?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .build()?;
    let mut attributes = vec![KeyValue::new("service.instance.id", instance.to_owned())];
    if let Some(id) = node_id {
        attributes.push(KeyValue::new(
            "baton.node_id",
            i64::try_from(id).unwrap_or(i64::MAX),
        ));
    }
    let resource = Resource::builder()
        .with_service_name(traces.service_name.clone())
        .with_attributes(attributes)
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        // Baton decides at each trace's root, before a span exists, and
        // creates spans only for sampled traces: every span that reaches the
        // SDK is kept.
        .with_sampler(Sampler::AlwaysOn)
        .with_resource(resource)
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(vars: &[(&str, &str)]) -> Result<Option<TraceSettings>, String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        trace_settings(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn off_unless_an_endpoint_is_set() {
        assert_eq!(settings(&[]), Ok(None));
        assert_eq!(settings(&[("OTEL_SERVICE_NAME", "x")]), Ok(None));
        let on = settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")]);
        assert_eq!(
            on,
            Ok(Some(TraceSettings {
                service_name: "baton".into(),
                sampler: RootSampler::ParentAlwaysOn,
                transport: ExportTransport::from_vars(|_| None).expect("the defaults"),
            }))
        );
        let traces_only = settings(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://h/v1/traces")]);
        assert!(matches!(traces_only, Ok(Some(_))));
    }

    #[test]
    fn disabled_sdk_or_none_exporter_is_off() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        assert_eq!(
            settings(&[endpoint, ("OTEL_SDK_DISABLED", "TRUE")]),
            Ok(None)
        );
        assert_eq!(
            settings(&[endpoint, ("OTEL_TRACES_EXPORTER", "none")]),
            Ok(None)
        );
        assert!(matches!(
            settings(&[endpoint, ("OTEL_SDK_DISABLED", "false")]),
            Ok(Some(_))
        ));
    }

    #[test]
    fn only_http_protobuf_is_accepted() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        let grpc = settings(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]);
        assert!(grpc.is_err_and(|e| e.contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc")));
        // Refused even without an endpoint: the setting is wrong either way.
        let json = settings(&[("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")]);
        assert!(json.is_err());
        let fine = settings(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")]);
        assert!(matches!(fine, Ok(Some(_))));
    }

    #[test]
    fn samplers_and_ratios() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        let sampler = |name: &str, arg: Option<&str>| {
            let mut vars = vec![endpoint, ("OTEL_TRACES_SAMPLER", name)];
            if let Some(arg) = arg {
                vars.push(("OTEL_TRACES_SAMPLER_ARG", arg));
            }
            settings(&vars).map(|s| s.map(|s| s.sampler))
        };
        assert_eq!(
            sampler("parentbased_traceidratio", Some("0.01")),
            Ok(Some(RootSampler::ParentRatio(0.01)))
        );
        assert_eq!(
            sampler("traceidratio", None),
            Ok(Some(RootSampler::Ratio(1.0)))
        );
        assert_eq!(
            sampler("always_off", None),
            Ok(Some(RootSampler::AlwaysOff))
        );
        assert!(sampler("traceidratio", Some("2")).is_err());
        assert!(sampler("jaeger_remote", None).is_err());
    }
}
