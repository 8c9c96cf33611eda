"""Operating the runtime: Prometheus metrics and OpenTelemetry traces."""
