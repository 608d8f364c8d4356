"""How the tests run each blackbox CLI against a proxy: its configuration (as docs/agents.md gives it), a bare
environment with a temporary HOME, and the engine script of the scripted task.

The task: the engine is scripted (``docs/engine.md``, script lines keyed by the session id, which the proxy sends
upstream as the routing key) to answer the first request with a call to the CLI's own file-writing tool, whose
arguments create ``proof.txt`` in the CLI's working folder, and the second with a short final answer. The CLI runs
the tool itself; the test then reads the file and the proxy's export.

The session: each CLI is told to send ``X-Session-Id: <id>`` on every request (Codex: the provider's
``http_headers``; Claude Code: ``ANTHROPIC_CUSTOM_HEADERS``), the proxy's default session-id header, so the proxy
needs no flag. (Without it, a run is still one session under the CLI's own id: Codex's conversation id, sent as
``prompt_cache_key``; Claude Code's ``X-Claude-Code-Session-Id`` with ``--session-id-header``; docs/agents.md.)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import attrs
import trio

#: the file the scripted tool call creates, and what it holds
PROOF_FILE = "proof.txt"
#: the model name the CLIs are configured with (the engine's served name; the proxy accepts any)
MODEL = "dressage/embedded-engine"
#: a bound on one CLI run, so a hung CLI fails the test with its output instead of hanging the suite
CLI_RUN_BOUND = 300


def tool_call(model: str, name: str, arguments: dict[str, str]) -> str:
    """A tool call as the model writes it: Qwen3 JSON inside ``<tool_call>``, Qwen3.5 XML ``<function=...>``."""
    if model == "qwen3":
        return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"
    parameters = "".join(f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in arguments.items())
    return f"<tool_call>\n<function={name}>\n{parameters}</function>\n</tool_call>"


def turn(model: str, reasoning: str, rest: str) -> str:
    """Reasoning then ``rest``; a Qwen3.5 prompt already ends inside ``<think>``, so its output starts there."""
    opening = "<think>\n" if model == "qwen3" else ""
    return f"{opening}{reasoning}\n</think>\n\n{rest}"


def script(model: str, session_id: str, call: str, answer: str) -> list[dict[str, object]]:
    """The two engine turns of the task, for this session only: reasoning then the call, reasoning then the answer."""
    return [
        {"session": session_id, "output": turn(model, "I will write the file with my tool.", call)},
        {"session": session_id, "output": turn(model, "The tool wrote it.", answer)},
    ]


@attrs.frozen
class CliRun:
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return f"exit {self.returncode}\n--- stdout ---\n{self.stdout[-4000:]}\n--- stderr ---\n{self.stderr[-4000:]}"


def bare_env(home: Path, **more: str) -> dict[str, str]:
    """No variable of the user's (no real key, no proxy settings) but PATH; HOME a temporary folder."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8", **more}


async def run_cli(command: list[str], cwd: Path, env: dict[str, str]) -> CliRun:
    with trio.move_on_after(CLI_RUN_BOUND) as bound:
        result = await trio.run_process(command, cwd=cwd, env=env, stdin=b"", capture_stdout=True,
                                        capture_stderr=True, check=False)
    if bound.cancelled_caught:
        raise AssertionError(f"`{' '.join(command[:3])} ...` did not finish within {CLI_RUN_BOUND} s")
    return CliRun(result.returncode, result.stdout.decode(errors="replace"), result.stderr.decode(errors="replace"))


# -- Codex CLI ----------------------------------------------------------------------------------------------------

def codex_config(proxy_url: str, session_id: str | None) -> str:
    """``config.toml`` of a Codex home that points Codex at the proxy (docs/agents.md explains each line);
    ``session_id`` None: no ``X-Session-Id`` header (the proxy then takes Codex's ``prompt_cache_key``)."""
    header = "" if session_id is None else f'http_headers = {{ "X-Session-Id" = "{session_id}" }}\n'
    return f"""\
model = "{MODEL}"
model_provider = "dressage"
# Hosted tools are not served by the proxy (a 400): keep Codex from offering web search.
web_search = "disabled"

[agents]
enabled = false

[features]
goals = false

[model_providers.dressage]
name = "dressage-proxy"
base_url = "{proxy_url}/v1"
wire_api = "responses"
env_key = "DRESSAGE_API_KEY"
{header}"""


async def run_codex(
    codex: Path, proxy_url: str, session_id: str | None, workdir: Path, prompt: str, *, resume: bool = False,
) -> CliRun:
    home = workdir.parent / "home"
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(codex_config(proxy_url, session_id))
    # The sandbox is bypassed: the default one is read-only, and bubblewrap's namespaces are not always available
    # in a container; the scripted command only writes into the temporary working folder.
    # ``exec resume --last``: the newest recorded Codex session of this home, continued with a new prompt
    command = [str(codex), "exec", *(["resume", "--last"] if resume else []), "--skip-git-repo-check",
               "--dangerously-bypass-approvals-and-sandbox", *([] if resume else ["--cd", str(workdir)]), prompt]
    env = bare_env(home, CODEX_HOME=str(codex_home), DRESSAGE_API_KEY="not-needed")
    return await run_cli(command, workdir, env)


def codex_task(model: str, session_id: str, content: str, answer: str) -> list[dict[str, object]]:
    """Codex's shell tool as its request names it (``exec_command``, run with ``bash -lc`` in the working folder);
    the file holds ``content`` (single-quoted in the command: no ``'`` in it) and a newline."""
    assert "'" not in content
    command = f"printf '%s\\n' '{content}' > {PROOF_FILE}"
    return script(model, session_id, tool_call(model, "exec_command", {"cmd": command}), answer)


# -- Claude Code --------------------------------------------------------------------------------------------------

#: Claude Code's switch for its mid-conversation ``system`` turn (and the tool-change beta that rides on it): off,
#: it puts that text in ``system`` and sends only user and assistant messages (docs/agents.md: the alternative to
#: the front end's handling of that turn, which Qwen3.5's template would otherwise refuse in place).
NO_MID_CONVERSATION_SYSTEM = {"CLAUDE_CODE_MODEL_CAPABILITIES": "-mid_conv_system,-mid_conv_tool_change"}


async def run_claude(
    claude: Path, proxy_url: str, session_id: str, workdir: Path, prompt: str, *, resume: bool = False,
    more_env: dict[str, str] | None = None, own_session_id: bool = False,
) -> CliRun:
    """``own_session_id``: no ``X-Session-Id`` header; Claude Code's own ``--session-id`` (a uuid) names the run, and
    the proxy reads it from ``X-Claude-Code-Session-Id``."""
    home = workdir.parent / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = bare_env(
        home,
        ANTHROPIC_BASE_URL=proxy_url,
        ANTHROPIC_API_KEY="not-needed",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        DISABLE_TELEMETRY="1",
        DISABLE_AUTOUPDATER="1",
        DISABLE_ERROR_REPORTING="1",
        **({} if own_session_id else {"ANTHROPIC_CUSTOM_HEADERS": f"X-Session-Id: {session_id}"}),
        **(more_env or {}),
    )
    # acceptEdits: -p mode would refuse the Write tool otherwise (and --dangerously-skip-permissions is refused
    # as root). --output-format json: one result object with is_error and the final text.
    # ``--continue``: the newest conversation of this working folder, continued with a new prompt
    command = [str(claude), "-p", *(["--continue"] if resume else []), "--model", MODEL, "--permission-mode",
               "acceptEdits", "--output-format", "json", *(["--session-id", session_id] if own_session_id else []),
               prompt]
    return await run_cli(command, workdir, env)


def claude_task(model: str, session_id: str, path: Path, content: str, answer: str) -> list[dict[str, object]]:
    """Claude Code's ``Write`` tool (``file_path`` must be absolute); the file holds ``content`` and a newline."""
    arguments = {"file_path": str(path), "content": content + "\n"}
    return script(model, session_id, tool_call(model, "Write", arguments), answer)


# -- the export ---------------------------------------------------------------------------------------------------

async def assert_one_segment(proxy: Any, session_id: str, turns: int = 2) -> dict[str, Any]:
    """Every scripted turn went upstream under the session, in order, each prompt continuing the previous turn
    token for token, and the finalized session exports as ONE segment holding all of them (every output trained)."""
    records = proxy.requests_of(session_id)
    assert [record.source for record in records] == [f"script[{index}]" for index in range(turns)], records
    for before, after in zip(records, records[1:]):
        so_far = before.input_ids + before.output_ids
        assert after.input_ids[: len(so_far)] == so_far
    last = records[-1]
    segments = await proxy.segments(session_id)
    assert len(segments) == 1, [(s["num_turns"], s["boundary_reason"]) for s in segments]
    segment = segments[0]
    assert segment["token_ids"] == list(last.input_ids) + list(last.output_ids)
    assert segment["num_turns"] == turns and segment["boundary_reason"] == "session_start"
    assert sum(segment["loss_mask"]) == sum(len(record.output_ids) for record in records)
    assert segment["loss_mask"][-len(last.output_ids):] == [1] * len(last.output_ids)
    return segment


# -- the full target (./dev e2e-cli): a second run of the CLI continues the conversation -----------------------------

#: set by ``./dev e2e-cli``: the extra CLI runs (each CLI's resume, each CLI without a session header) run too
FULL_TARGET = os.environ.get("DRESSAGE_E2E_CLI_FULL") == "1"


def follow_up(model: str, session_id: str, answer: str) -> dict[str, object]:
    """The engine's answer to the resumed run's new prompt."""
    return {"session": session_id, "output": turn(model, "Answer the follow-up.", answer)}
