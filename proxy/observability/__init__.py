"""What the proxy tells an operator about itself: Prometheus metrics (``metrics``), structured log lines
(``logs``), and the trajectory viewer's data (``proxy/ui/``). docs/observability.md is the operator's view."""
