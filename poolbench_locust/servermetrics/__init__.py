"""The server's own view beside the client's: its Prometheus /metrics, scraped during the run (--server-metrics)."""
