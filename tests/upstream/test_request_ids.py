"""Request ids are unique and never a prefix of one another (SGLang aborts by rid prefix)."""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.random_ids import BATCH, new_completion_id, random_hex
from proxy.request_id import new_request_id
from proxy.upstream.request_ids import RID_LENGTH, check_rid, is_valid_rid, new_rid

valid_rids = st.from_regex(r"[0-9a-f]{32}", fullmatch=True)


@given(st.integers(2, 200))
def test_new_rids_are_distinct_and_prefix_free(count):
    rids = [new_rid() for _ in range(count)]
    assert len(set(rids)) == count
    assert all(is_valid_rid(r) and len(r) == RID_LENGTH for r in rids)
    for a in rids:
        assert sum(b.startswith(a) for b in rids) == 1  # only itself


@given(valid_rids, valid_rids)
def test_a_valid_rid_is_a_prefix_of_another_only_if_equal(a, b):
    assert b.startswith(a) == (a == b)


@given(st.text(max_size=40).filter(lambda s: not is_valid_rid(s)))
def test_other_shapes_are_refused(rid):
    with pytest.raises(ValueError):
        check_rid(rid)


@pytest.mark.parametrize("rid", ["", "abc", "A" * 32, "0" * 31, "0" * 33, "0" * 31 + "g", "0" * 32 + "-seg1"])
def test_prefix_unsafe_examples_are_refused(rid):
    assert not is_valid_rid(rid)
    with pytest.raises(ValueError):
        check_rid(rid)


def test_every_random_id_of_a_request_has_the_shape_its_reader_expects():
    # The request id (OpenAI's ``req_`` + 32 hex), the completion id (``chatcmpl-`` + 32 hex) and the rid all come
    # from proxy.random_ids: 32 lower-case hex digits, fresh each time.
    ids = [random_hex() for _ in range(1000)]
    assert len(set(ids)) == 1000 and all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    assert re.fullmatch(r"req_[0-9a-f]{32}", new_request_id())
    assert re.fullmatch(r"chatcmpl-[0-9a-f]{32}", new_completion_id())
    assert is_valid_rid(new_rid())


def test_a_forked_child_never_hands_out_an_id_its_parent_drew():
    # ids are drawn BATCH at a time; a child of a process holding undrawn ids must draw its own.
    random_hex()  # the parent now holds undrawn ids
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report the ids it hands out, then leave at once
        os.close(read)
        os.write(write, "".join(random_hex() for _ in range(BATCH)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        child = pipe.read().decode()
    os.waitpid(pid, 0)
    parent = [random_hex() for _ in range(BATCH)]
    child_ids = [child[at:at + 32] for at in range(0, len(child), 32)]
    assert len(child_ids) == BATCH and not set(child_ids) & set(parent)


def test_ids_handed_out_across_threads_are_all_different():
    with ThreadPoolExecutor(4) as pool:
        ids = [i for batch in pool.map(lambda _: [random_hex() for _ in range(500)], range(8)) for i in batch]
    assert len(set(ids)) == len(ids) == 4000
