"""Model families: each a small module (TITO tokenizer, parser names, detection signature), one registry.

- :class:`ModelFamily` -- the record a family module builds (``model_family.py``).
- :data:`FAMILIES`, :func:`get_family`, :func:`family_names`, :func:`load_tito_tokenizer` -- the registry
  (``registry.py``), with the per-process tokenizer cache.
- :func:`detect_family` -- the family of a tokenizer folder from its chat template (``detection.py``).
- ``qwen3.py``, ``qwen3_5.py`` (Qwen3.5 and Qwen3.6), ``template_only.py`` (an unrecognised template: last-step mode).

docs/families.md lists the families, how each is verified, and the recipe for adding one.
"""

from proxy.families.detection import Detection, detect_family
from proxy.families.model_family import ModelFamily, TitoMode
from proxy.families.qwen3 import Qwen3TitoTokenizer
from proxy.families.qwen3_5 import Qwen35TitoTokenizer, Qwen36TitoTokenizer
from proxy.families.registry import FALLBACK, FAMILIES, family_name, family_names, get_family, load_tito_tokenizer
from proxy.families.template_only import TemplateOnlyTokenizer

__all__ = [
    "FALLBACK",
    "FAMILIES",
    "Detection",
    "ModelFamily",
    "Qwen35TitoTokenizer",
    "Qwen36TitoTokenizer",
    "Qwen3TitoTokenizer",
    "TemplateOnlyTokenizer",
    "TitoMode",
    "detect_family",
    "family_name",
    "family_names",
    "get_family",
    "load_tito_tokenizer",
]
