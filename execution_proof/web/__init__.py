"""HTTP edge: Sanic app factory, blueprints, error rendering, pages."""
