"""The web dashboard at /ui: server-rendered pages over the api's own services (docs/dashboard.md)."""
