"""Render Qwen chat templates with jinja2 the way transformers does (``tojson`` without HTML escaping)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jinja2


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message: str) -> None:
    raise jinja2.TemplateError(message)


def chat_template(tokenizer_path: Path) -> str:
    jinja_file = tokenizer_path / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text()
    return json.loads((tokenizer_path / "tokenizer_config.json").read_text())["chat_template"]


def render(tokenizer_path: Path, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
           **kwargs: Any) -> str:
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    template = env.from_string(chat_template(tokenizer_path))
    return template.render(messages=messages, tools=tools, add_generation_prompt=True, **kwargs)


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
