"""Route modules. Each has ``register(app, services)``; ``proxy.app.ROUTE_MODULES`` lists them."""
