"""The trajectory viewer (docs/observability.md, "The trajectory viewer"): a static page (``static/``) and the JSON it
reads under ``/ui/api/``, built from a *source*: the running proxy's registry and store (``registry_source.py``,
served at ``/ui/`` by ``proxy/routes/ui.py``) or an exported file (``export_file.py``, served by
``dressage-proxy view``, ``view_command.py``). Both sources answer the same JSON shape (``viewer_routes.py``).
Reading for the viewer never drains nor changes a session."""
