"""The load generator's own figures for Prometheus (--prometheus-port): see docs/prometheus.md."""
