"""What an operator watches: replication lag, Prometheus metrics and the health endpoints."""
