"""Operations: metrics (Prometheus, OTLP), structured logs, trace and metric export."""
