"""Operations: Prometheus metrics, the HTTP side port (/metrics, /healthz, /readyz), logs."""
