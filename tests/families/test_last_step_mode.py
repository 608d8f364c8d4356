"""An unrecognised chat template is served, never refused: every step is a full render of the folder's own
template (its own segment), recorded token-exact, with one start-up warning.

The folder is Qwen3.5's with an edited generation prompt (it primes the reasoning), which no family pins. The proxy
is configured from the command line (detection included) and runs on its embedded engine; the official openai SDK
plays the agent over three turns.
"""

from __future__ import annotations

import logging

import tokenizers
import trio

from engine import EngineConfig
from proxy.cli import build_parser, config_from_args, run_proxy
from tests.e2e.harness import Proxy, session_headers

from .edited_folders import primed_qwen3_5

REPLIES = ("Four.", "Six, since three and three make six.", "You are welcome 😀")
QUESTIONS = ("What is 2+2?", "And 3+3?", "Thanks!")


async def test_an_unrecognised_template_serves_a_multi_turn_session_token_exact_in_last_step_mode(
    nursery: trio.Nursery, qwen3_5_path, tmp_path, caplog
) -> None:
    from transformers import AutoTokenizer

    folder = primed_qwen3_5(qwen3_5_path, tmp_path / "primed")
    caplog.set_level(logging.WARNING)
    args = build_parser().parse_args([
        "--port", "0", "--tokenizer-path", str(folder),
        "--tool-call-parse-backend", "local", "--reasoning-parse-backend", "local",
    ])
    config = config_from_args(args)
    assert (config.trajectory_build_model, config.model_family_source) == ("generic", "unrecognised")
    script = tuple({"session": "s", "output": reply} for reply in REPLIES)
    handle = await nursery.start(run_proxy, config, EngineConfig(tokenizer_path=folder, script_lines=script))
    proxy = Proxy(handle, folder, "generic")
    warnings = [r.getMessage() for r in caplog.records if "chat template not recognised" in r.getMessage()]
    assert len(warnings) == 1 and str(folder) in warnings[0] and "last-step mode" in warnings[0]

    messages: list[dict] = []
    async with proxy.async_client(default_headers=session_headers("s")) as client:
        for question, reply in zip(QUESTIONS, REPLIES):
            messages.append({"role": "user", "content": question})
            answer = await client.chat.completions.create(model="m", messages=messages)
            assert answer.choices[0].message.content == reply  # no parser: the raw text comes back
            messages.append({"role": "assistant", "content": answer.choices[0].message.content})

    # Every prompt the model got is the official render (transformers) of that request through the edited template.
    official = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    model_tokenizer = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    records = proxy.requests_of("s")
    assert len(records) == 3
    for turn, record in enumerate(records):
        text = official.apply_chat_template(messages[: 2 * turn + 1], tokenize=False, add_generation_prompt=True)
        assert text.endswith("<|im_start|>assistant\n<think>\nLet me think step by step.\n")
        assert list(record.input_ids) == model_tokenizer.encode(text, add_special_tokens=False).ids

    # Recorded token-exact: one segment per step, the prompt as given (mask 0) and the generated ids (mask 1).
    segments = await proxy.segments("s")
    assert len(segments) == 3
    for segment, record in zip(segments, records):
        prompt, generated = list(record.input_ids), list(record.output_ids)
        assert segment["token_ids"] == prompt + generated
        assert segment["loss_mask"] == [0] * len(prompt) + [1] * len(generated)
        assert segment["build_mode"] == "concat" and segment["logprobs"] is not None
    assert segments[0]["boundary_reason"] == "session_start"
    for segment in segments[1:]:
        assert segment["boundary_reason"] == "tito_failed" and "last_step_mode" in segment["boundary_detail"]
