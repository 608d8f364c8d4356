"""Request bodies to SGLang (issue 21 items 2 and 4): ``wire_json.dumps_body`` writes an ``array`` of token ids without
a Python object per id and the rest through orjson, and the bytes read back to exactly the values of the standard
library's compact JSON of the same body with a list (type for type: 1, 1.0 and True stay apart); what the standard
library refuses (NaN, infinities) is refused alike."""

from __future__ import annotations

import json
import math
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.upstream.client import _generate_body
from proxy.upstream.wire_json import dumps_body
from tests.upstream.test_wire_json import same

_INT32 = st.integers(-(2**31), 2**31 - 1)
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.text(),
                     st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([1e-05, 1e16, 1.5e300, -0.0]))
_JSON = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner,
                                                                                              max_size=3), max_leaves=8)


def same_json(ours: bytes, theirs: bytes) -> bool:
    return same(json.loads(ours), json.loads(theirs))


def reference(body):
    """What the upstream client sent before: the body with lists, through the standard library."""
    plain = {key: value.tolist() if isinstance(value, array) else value for key, value in body.items()}
    return json.dumps(plain, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


@settings(max_examples=200, deadline=None)
@given(ids=st.lists(_INT32, max_size=300), extra=st.dictionaries(st.text(), _JSON, max_size=4),
       typecode=st.sampled_from("iq"))
def test_an_id_array_is_written_as_the_same_bytes_as_its_list(ids, extra, typecode):
    body = {"input_ids": array(typecode, ids), **{k: v for k, v in extra.items() if k != "input_ids"}}
    assert same_json(dumps_body(body), reference(body))
    assert json.loads(dumps_body(body))["input_ids"] == ids


@settings(max_examples=200, deadline=None)
@given(members=st.lists(st.tuples(st.text(max_size=4), st.one_of(_JSON, st.lists(_INT32, max_size=20).map(
    lambda ids: array("i", ids)))), max_size=8, unique_by=lambda member: member[0]))
def test_arrays_anywhere_among_the_members_give_the_standard_librarys_values(members):
    # dumps_body writes the members between arrays a run at a time: any order, any number of arrays and runs.
    body = dict(members)
    assert same_json(dumps_body(body), reference(body))


def test_the_generate_body_keeps_the_session_array_and_encodes_it_identically():
    ids = array("i", range(-5, 40_000, 7))
    body = _generate_body(ids, {"max_new_tokens": 8, "temperature": 0.5}, rid="r1", stream=True,
                          return_logprob=True, return_routed_experts=False, routed_experts_start_len=None,
                          extra_body={"logprob_start_len": -1})
    assert body["input_ids"] is ids  # no copy, no list
    assert dumps_body(body) == reference(body)  # these values are written alike, byte for byte
    listed = _generate_body(ids.tolist(), {"max_new_tokens": 8, "temperature": 0.5}, rid="r1", stream=True,
                            return_logprob=True, return_routed_experts=False, routed_experts_start_len=None,
                            extra_body={"logprob_start_len": -1})
    assert dumps_body(listed) == dumps_body(body)


def test_a_body_json_cannot_write_is_refused_as_before():
    with pytest.raises(ValueError):
        dumps_body({"input_ids": array("i", [1]), "sampling_params": {"temperature": math.nan}})
    with pytest.raises(ValueError):
        dumps_body({"x": math.inf})
    with pytest.raises(ValueError):
        dumps_body({"input_ids": array("i", [1]), "sampling_params": {"logit_bias": {"5": [0.5, -math.inf]}}})
    # what orjson cannot write is written by the standard library
    assert dumps_body({"seed": 2**70, 3: "é"}) == '{"seed":1180591620717411303424,"3":"é"}'.encode()
    assert dumps_body({"input_ids": array("i")}) == b'{"input_ids":[]}'
    assert dumps_body([1, "é"]) == '[1,"é"]'.encode()
