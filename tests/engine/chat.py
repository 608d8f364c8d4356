"""Prompts for the engine's tests, rendered by the project's own chat-template renderer (``proxy.tokenization``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proxy.families import load_tito_tokenizer


def render(tokenizer_path: Path, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
           **kwargs: Any) -> str:
    """The model's chat template rendered for ``messages`` with the generation prompt."""
    family = "qwen3_5" if (tokenizer_path / "chat_template.jinja").is_file() else "qwen3"
    return load_tito_tokenizer(family, tokenizer_path).render_full(messages, tools, kwargs or None)


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "days": {"type": "integer"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "days", "unit"],
        },
    },
}
