"""The drift audit's classification of the first divergence."""

from __future__ import annotations

from proxy.tokenization import DriftKind, audit_drift

from .test_incremental import OPENING, assistant, generate


def test_audit_drift_identical_sequences(tito):
    ids = tito.encode_full(OPENING)
    report = audit_drift(ids, list(ids), tito)
    assert report.kind is DriftKind.NONE and not report.drifted and report.first_divergence is None


def test_audit_drift_same_text_other_tokens_is_bpe_resplit(tito):
    canonical = tito.encode_text("<|im_start|>user\na\n\nb<|im_end|>")
    double = tito.encode_text("\n\n")[0]
    i = canonical.index(double)
    tito_ids = canonical[:i] + [tito.newline_id, tito.newline_id] + canonical[i + 1 :]
    report = audit_drift(tito_ids, canonical, tito)
    assert report.kind is DriftKind.BPE_RESPLIT and report.first_divergence == i and report.byte_divergence is None


def test_audit_drift_missing_junction_newline_is_junction(tito):
    tito_ids = tito.encode_text("<|im_start|>user\na<|im_end|><|im_start|>assistant\n")
    canonical = tito.encode_text("<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\n")
    report = audit_drift(tito_ids, canonical, tito)
    assert report.kind is DriftKind.JUNCTION and report.first_divergence == 5


def test_audit_drift_dropped_reasoning_is_reasoning_stripped(tito):
    kwargs = {"enable_thinking": True}
    answer = assistant(0, reasoning="hidden", n_calls=0, content="Shown.")
    messages = OPENING + [answer, {"role": "user", "content": "more"}]
    tito_ids = (
        tito.encode_full(OPENING, None, kwargs)
        + generate(tito, answer, kwargs)
        + list(tito.encode_incremental([tito.end_of_turn_id], messages[-1:], chat_template_kwargs=kwargs).ids)
    )
    report = audit_drift(tito_ids, tito.encode_full(messages, None, kwargs), tito)
    assert report.kind is DriftKind.REASONING_STRIPPED
    assert "hidden" in report.tito_snippet and "hidden" not in report.canonical_snippet


def test_audit_drift_different_content_is_other(tito):
    report = audit_drift(tito.encode_text("<|im_start|>user\ncat"), tito.encode_text("<|im_start|>user\ndog"), tito)
    assert report.kind is DriftKind.OTHER and report.first_divergence == 3
    assert report.tito_snippet.endswith("cat") and report.canonical_snippet.endswith("dog")


def test_audit_drift_truncated_at_turn_end_is_junction(tito):
    canonical = tito.encode_text("<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\n")
    report = audit_drift(canonical[:5], canonical, tito)
    assert report.kind is DriftKind.JUNCTION and report.first_divergence == 5
