"""Endpoints: one declarative `Endpoint` per server route, grouped by server."""
