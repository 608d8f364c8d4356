"""The trajectory viewer on a running proxy: ``/ui/`` and its JSON under ``/ui/api/`` (``proxy/ui/viewer_routes.py``
lists the routes), over this proxy's registry and store (``proxy/ui/registry_source.py``). Admin class
(``proxy/access.py``): with ``--admin-key`` a browser signs in with HTTP Basic, the key as its password."""

from __future__ import annotations

from quart_trio import QuartTrio

from proxy.services import ProxyServices
from proxy.ui.registry_source import RegistrySource
from proxy.ui.token_text import TokenTexts
from proxy.ui.viewer_routes import add_viewer_routes


def register(app: QuartTrio, services: ProxyServices) -> None:
    add_viewer_routes(app, RegistrySource(services.sessions, TokenTexts(services.tokenizer)))
