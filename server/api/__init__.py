"""HTTP: the app, middleware, routes (thin) and the HTTP protocol."""
