"""`tracker serve`: the store as a local web app (``app.create_app``; what each page shows: ``pages``)."""
