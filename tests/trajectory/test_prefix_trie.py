"""The prefix trie: longest-prefix walk, pending nodes, nearest checkpoint, upsert (refresh vs sibling), variants."""

from __future__ import annotations

from array import array

from proxy.trajectory.message_keys import context_key, message_key, reasoning_variant
from proxy.trajectory.pending_step import FULL_ENCODE
from proxy.trajectory.prefix_trie import NodeKind, PrefixTrie
from proxy.trajectory.tokens import Step, committed_span, context_span

SYS = {"role": "system", "content": "s"}
USER = {"role": "user", "content": "u"}


def keys(messages):
    return [message_key(m) for m in messages], [reasoning_variant(m) for m in messages]


def walk_and_attach(trie, context, messages):
    ks, vs = keys(messages)
    node, matched = trie.match(context, ks, vs)
    return trie.attach(node, messages[matched:], ks[matched:]), matched


_ids = iter(range(1, 1000))


def commit(trie, parent, answer, base=None):
    """Upsert ``answer`` under ``parent`` with a new checkpoint; returns (node, refreshed, step)."""
    node, refreshed = trie.upsert_assistant(parent, answer, message_key(answer), reasoning_variant(answer))
    span = committed_span(context_span([1]), [2], None, [None])
    step = Step.of(span, step_id=next(_ids), base=base, chain_id=1, position=1, node=node, session_id="s",
                   generation=1, finish_reason="stop", extendable=True)
    trie.set_checkpoint(node, step)
    return node, refreshed, step


def new_trie():
    trie = PrefixTrie()
    return trie, trie.context(context_key(None), None, {})


def test_prefix_trie_attach_creates_pending_nodes_and_match_finds_them():
    trie, ctx = new_trie()
    attach, matched = walk_and_attach(trie, ctx, [SYS, USER])
    assert matched == 0 and attach.depth == 2 and attach.kind is NodeKind.MESSAGE
    assert trie.statistics().pending == 2 and trie.statistics().nodes == 3
    again, matched = walk_and_attach(trie, ctx, [SYS, USER])
    assert again is attach and matched == 2
    assert trie.messages(attach) == [SYS, USER]
    assert trie.nearest_checkpoint(attach) is None


def test_prefix_trie_commit_makes_the_path_non_pending_and_is_the_nearest_checkpoint():
    trie, ctx = new_trie()
    attach, _ = walk_and_attach(trie, ctx, [SYS, USER])
    node, refreshed, step = commit(trie, attach, {"role": "assistant", "content": "a"})
    assert not refreshed and trie.statistics().pending == 0 and trie.statistics().checkpoints == 1
    follow, matched = walk_and_attach(trie, ctx, [SYS, USER, {"role": "assistant", "content": "a"}, USER])
    assert matched == 3
    assert trie.nearest_checkpoint(follow) is step
    assert trie.statistics().pending == 1


def test_prefix_trie_same_answer_refreshes_different_answer_is_a_sibling():
    trie, ctx = new_trie()
    attach, _ = walk_and_attach(trie, ctx, [SYS, USER])
    first, _, step1 = commit(trie, attach, {"role": "assistant", "content": "a"})
    again, refreshed, step2 = commit(trie, attach, {"role": "assistant", "content": "a"})
    assert again is first and refreshed and first.checkpoint is step2 and first.commits == 2
    other, refreshed, _ = commit(trie, attach, {"role": "assistant", "content": "b"})
    assert other is not first and not refreshed
    assert len(list(attach.child_variants())) == 2 and trie.statistics().checkpoints == 2


def test_prefix_trie_contexts_never_share_nodes():
    trie = PrefixTrie()
    plain = trie.context(context_key(None), None, {})
    tools = trie.context(context_key([{"type": "function", "function": {"name": "t"}}]), [{"x": 1}], {})
    a, _ = walk_and_attach(trie, plain, [SYS, USER])
    b, matched = walk_and_attach(trie, tools, [SYS, USER])
    assert a is not b and matched == 0
    assert trie.context_of(b) is tools and tools.message.tools == ({"x": 1},)
    assert len(trie.contexts()) == 2


def test_prefix_trie_echo_without_reasoning_follows_the_committed_variant():
    trie, ctx = new_trie()
    attach, _ = walk_and_attach(trie, ctx, [SYS, USER])
    thought = {"role": "assistant", "content": "a", "reasoning_content": "because"}
    node, _, step = commit(trie, attach, thought)
    # The agent drops the reasoning when echoing: it still continues from the checkpoint.
    follow, matched = walk_and_attach(trie, ctx, [SYS, USER, {"role": "assistant", "content": "a"}, USER])
    assert matched == 3 and follow.parent is node and trie.nearest_checkpoint(follow) is step


def test_prefix_trie_variant_rule_exact_committed_then_latest_committed_then_uncommitted():
    trie, ctx = new_trie()
    attach, _ = walk_and_attach(trie, ctx, [SYS, USER])
    r1 = {"role": "assistant", "content": "a", "reasoning_content": "one"}
    r2 = {"role": "assistant", "content": "a", "reasoning_content": "two"}
    n1, _, _ = commit(trie, attach, r1)
    n2, _, _ = commit(trie, attach, r2)
    assert n1 is not n2  # reasoning tells siblings apart
    ks, vs = keys([SYS, USER, r1])
    assert trie.match(ctx, ks, vs)[0] is n1  # exact reasoning, committed
    ks, vs = keys([SYS, USER, {"role": "assistant", "content": "a", "reasoning_content": "edited"}])
    assert trie.match(ctx, ks, vs)[0] is n2  # no exact: the latest committed
    # An uncommitted (warm-start) variant is followed only when nothing with that key is committed.
    warm = {"role": "assistant", "content": "w"}
    w_node, _ = walk_and_attach(trie, ctx, [SYS, USER, warm])
    ks, vs = keys([SYS, USER, warm])
    assert trie.match(ctx, ks, vs)[0] is w_node and w_node.checkpoint is None
    committed_w, _, _ = commit(trie, attach, {"role": "assistant", "content": "w", "reasoning_content": "r"})
    assert trie.match(ctx, ks, vs)[0] is committed_w


def test_prefix_trie_warm_start_assistant_node_gets_its_first_checkpoint_by_upsert():
    trie, ctx = new_trie()
    warm = {"role": "assistant", "content": "w"}
    w_node, _ = walk_and_attach(trie, ctx, [SYS, USER, warm])
    node, refreshed, _ = commit(trie, w_node.parent, {"role": "assistant", "content": "w"})
    assert node is w_node and not refreshed and trie.statistics().pending == 0


def test_prefix_trie_nearest_checkpoint_skips_uncommitted_nodes_and_stops_at_the_context():
    trie, ctx = new_trie()
    attach, _ = walk_and_attach(trie, ctx, [SYS, USER])
    node, _, step = commit(trie, attach, {"role": "assistant", "content": "a"})
    deep, _ = walk_and_attach(trie, ctx, [SYS, USER, {"role": "assistant", "content": "a"}, USER,
                                          {"role": "assistant", "content": "never generated"}, USER])
    assert trie.nearest_checkpoint(deep) is step
    assert trie.nearest_checkpoint(ctx) is None


def test_prefix_trie_release_removes_exactly_the_pending_nodes_no_one_holds():
    trie = PrefixTrie()
    ctx = trie.context(context_key(None), None, {})
    base, _ = walk_and_attach(trie, ctx, [SYS, USER])
    commit(trie, base, {"role": "assistant", "content": "a"})
    trie.release(base)
    before = trie.statistics()
    history = [SYS, USER, {"role": "assistant", "content": "a"}]
    # Two holders of one pending path (two samples of one prompt), a third extending it.
    first, _ = walk_and_attach(trie, ctx, history + [USER])
    second, matched = walk_and_attach(trie, ctx, history + [USER])
    third, _ = walk_and_attach(trie, ctx, history + [USER, {"role": "assistant", "content": "b"}, SYS])
    assert second is first and matched == 4 and trie.holds == 3
    assert trie.release(first) == 0 and trie.release(second) == 0  # the third still needs the path
    assert trie.statistics().pending == 3
    assert trie.release(third) == 3
    assert trie.statistics() == before and trie.holds == 0
    assert trie.match(ctx, *keys(history + [USER]))[1] == 3


def test_prefix_trie_release_after_a_commit_keeps_the_committed_path_and_an_unused_context_goes():
    trie = PrefixTrie()
    ctx = trie.context(context_key(None), None, {})
    attach, _ = walk_and_attach(trie, ctx, [SYS, USER])
    commit(trie, attach, {"role": "assistant", "content": "a"})
    assert trie.release(attach) == 0 and trie.statistics().nodes == 4
    other = trie.context(context_key([{"type": "function"}]), [{"type": "function"}], {})
    failed, _ = walk_and_attach(trie, other, [SYS])
    assert trie.statistics().contexts == 2
    assert trie.release(failed) == 2  # its message and the context it created
    assert trie.statistics().contexts == 1 and trie.statistics().nodes == 4
    assert other.key not in [context.key for context in trie.contexts()]


def test_prefix_trie_shared_encoding_entries_are_counted_and_removed_by_the_last_holder():
    trie, ctx = new_trie()
    attach, _ = walk_and_attach(trie, ctx, [SYS])
    one = attach.shared_encoding(FULL_ENCODE, array("i", [1, 2]))
    two = attach.shared_encoding(FULL_ENCODE, array("i", [1, 2]))
    assert two is one and attach.encodings[FULL_ENCODE][1] == 2
    attach.release_encoding(FULL_ENCODE, one)
    assert attach.encodings[FULL_ENCODE][1] == 1
    attach.release_encoding(FULL_ENCODE, array("i", [1, 2]))  # not the stored array: nothing to give back
    # A second signature (an encode after a step) beside the first: both kept, each with its own holders.
    after = attach.shared_encoding(7, array("i", [3]))
    assert dict(attach.encodings) == {FULL_ENCODE: (one, 1), 7: (after, 1)}
    attach.release_encoding(7, after)
    assert dict(attach.encodings) == {FULL_ENCODE: (one, 1)}
    attach.release_encoding(FULL_ENCODE, two)
    assert attach.encodings is None


def test_a_committed_step_that_alone_holds_an_encoding_stands_for_the_entry():
    # settle_encoding: the node keeps the step instead of a _OneEncoding (issue 21 item 5); the entry reads the same
    # and sharing, giving back and a second signature work on it as on any entry.
    trie, ctx = new_trie()
    attach, _ = walk_and_attach(trie, ctx, [SYS])
    ids = context_span(attach.shared_encoding(FULL_ENCODE, array("i", [1, 2]).tobytes())).stored_context
    span = committed_span(context_span(ids), [2], None, [None])
    node, _ = trie.upsert_assistant(attach, {"role": "assistant", "content": "a"}, message_key(
        {"role": "assistant", "content": "a"}), None)
    step = Step.of(span, step_id=next(_ids), base=None, chain_id=1, position=1, node=node, session_id="s",
                   generation=1, finish_reason="stop", extendable=True)
    later = Step.of(span, step_id=next(_ids), base=step, chain_id=1, position=2, node=node, session_id="s",
                    generation=2, finish_reason="stop", extendable=True)
    attach.settle_encoding(later)  # another signature (it extends a step): not its entry, nothing changes
    assert type(attach._encodings) is not Step
    attach.settle_encoding(step)
    assert attach._encodings is step and dict(attach.encodings) == {FULL_ENCODE: (ids, 1)}
    again = attach.shared_encoding(FULL_ENCODE, array("i", [1, 2]).tobytes())  # a resample of the same prompt
    assert again is ids and dict(attach.encodings) == {FULL_ENCODE: (ids, 2)}
    attach.release_encoding(FULL_ENCODE, again)  # it failed: the committed step's use stays
    assert dict(attach.encodings) == {FULL_ENCODE: (ids, 1)}
    attach.settle_encoding(step)
    other = attach.shared_encoding(7, array("i", [3]).tobytes())
    assert dict(attach.encodings) == {FULL_ENCODE: (ids, 1), 7: (other, 1)}
    attach.settle_encoding(step)  # two entries: a step stands for one only
    assert type(attach._encodings) is dict


def test_a_node_knows_its_kind_its_commits_and_whether_a_step_was_committed_below_it():
    # kind is derived from where the node is, and one slot holds both the commit count and the pending mark
    # (issue 21 item 5): the walk marks every pending node above a commit and nothing else.
    trie, ctx = new_trie()
    attach, _ = walk_and_attach(trie, ctx, [SYS, USER])
    assert (trie.root.kind, ctx.kind, attach.kind) == (NodeKind.ROOT, NodeKind.CONTEXT, NodeKind.MESSAGE)
    assert (attach.commits, attach.committed_below, attach.parent.committed_below) == (0, False, False)
    answer = {"role": "assistant", "content": "a"}
    node, _, _ = commit(trie, attach, answer)
    assert (node.commits, node.committed_below) == (1, True)
    assert (attach.commits, attach.committed_below, attach.parent.committed_below) == (0, True, True)
    commit(trie, attach, answer)  # the same answer again: a refresh of the node
    assert node.commits == 2 and trie.statistics().pending == 0
    sibling, _ = walk_and_attach(trie, ctx, [SYS, {"role": "user", "content": "other"}])
    assert (sibling.commits, sibling.committed_below, sibling.parent.committed_below) == (0, False, True)
    assert trie.statistics().pending == 1


def test_sessions_sending_the_same_tools_share_one_context_info_and_each_keeps_its_own_key_order():
    tools = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
    reordered = [{"function": {"parameters": {"type": "object"}, "name": "search"}, "type": "function"}]
    kwargs = {"enable_thinking": False}

    def context(sent, template_kwargs=kwargs):
        return PrefixTrie().context(context_key(sent, template_kwargs), sent, template_kwargs)

    first, second, other_order = context(tools), context([dict(t) for t in tools]), context(reordered)
    assert first.key == other_order.key  # one context for the trie: the key is canonical
    assert second.message is first.message and second.key is first.key  # held once for both sessions
    assert other_order.message is not first.message  # a re-encode renders the order this session sent
    assert [list(t) for t in other_order.message.tools] == [["function", "type"]]
    assert dict(first.message.template_kwargs) == kwargs
    assert context(None, {}).message is context(None, {}).message
    assert context(None, {"enable_thinking": True}).message.template_kwargs == {"enable_thinking": True}
    odd = [{"type": "function", 1: "not a JSON key"}]  # kept for its session, not shared
    assert context(odd, {}).message is not context(odd, {}).message
    assert context(odd, {}).message.tools == tuple(odd)


def test_a_shared_context_lives_only_as_long_as_a_session_holds_it():
    import gc

    import orjson

    from proxy.trajectory import node_contents

    tools = [{"type": "function", "function": {"name": "only_here", "description": "x" * 4000}}]
    tries = [PrefixTrie() for _ in range(2)]
    nodes = [trie.context(context_key(tools), tools, {}) for trie in tries]
    assert nodes[0].message is nodes[1].message and nodes[1].key is nodes[0].key
    probe = context_key(tools)  # an equal key of its own: the test holds none of the shared objects
    shared = ((probe.tools, probe.template_kwargs), (probe, orjson.dumps(tools)))
    assert shared[0] in node_contents._CONTEXT_KEYS and shared[1] in node_contents._CONTEXT_INFOS
    del tries, nodes
    gc.collect()
    assert shared[0] not in node_contents._CONTEXT_KEYS and shared[1] not in node_contents._CONTEXT_INFOS
