"""Key layout: owner in every key, escaping, one hash-tag slot per operation."""

from __future__ import annotations

import itertools
import uuid
from urllib.parse import quote

import pytest
from redis.crc import key_slot

from stores.redis.keys import RedisKeys, decode, encode
from stores.tenants import tenant_of, tenant_owner

pytestmark = pytest.mark.redis

NASTY = ["", "a", "a:b", "a%3Ab", "{x}", "}{", "a}b{c", "%", "%25", "ü/é ✓", ":", "{}"]


def hash_tag(key: str) -> str:
    """The part of `key` Redis Cluster hashes (its rule: first '{', then the next '}')."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return key


def test_encode_is_injective_and_reversible() -> None:
    encoded = [encode(value) for value in NASTY]
    assert len(set(encoded)) == len(NASTY)
    assert [decode(value) for value in encoded] == NASTY
    for value in encoded:
        assert value and not set(value) & set(":{}")


def test_encode_names_keys_as_percent_encoding_always_has() -> None:
    """Keys written before the shortcut for plain ids are found after it: every component is
    encoded exactly as `quote(value, safe="")` encodes it (the empty one as a lone `%`)."""
    single = [chr(code) for code in range(1, 256)] + ["\u2713", "\U0001f600"]
    values = [*NASTY, *single, str(uuid.uuid4()), "owner_1.a~b-C", "id\n", "tenant-0"]
    for value in values:
        assert encode(value) == (quote(value, safe="") if value else "%"), repr(value)


def test_task_keys_share_the_task_tag_and_name_the_owner() -> None:
    keys = RedisKeys("a2a")
    for owner, task_id in itertools.product(NASTY, NASTY):
        of_task = [
            keys.task(owner, task_id),
            keys.journal(owner, task_id),
            keys.checkpoint(owner, task_id),
            keys.lease(owner, task_id),
            keys.cancel_flag(owner, task_id),
        ]
        assert {hash_tag(key) for key in of_task} == {encode(task_id)}
        assert len({key_slot(key.encode()) for key in of_task}) == 1
        assert all(f":{encode(owner)}:" in key for key in of_task)


def test_conversation_and_index_tags() -> None:
    keys = RedisKeys("a2a")
    for owner, context_id in itertools.product(NASTY, NASTY):
        assert hash_tag(keys.conversation(owner, context_id)) == encode(context_id)
        assert hash_tag(keys.claim(owner, context_id)) == encode(context_id)
        assert hash_tag(keys.owner_tasks(owner)) == encode(owner)
        assert hash_tag(keys.context_tasks(owner, context_id)) == encode(owner)
        assert hash_tag(keys.owner_tasks_by_state(owner)) == encode(owner)
        assert hash_tag(keys.context_tasks_by_state(owner, context_id)) == encode(owner)


def test_no_two_owner_task_pairs_share_a_key() -> None:
    keys = RedisKeys("a2a")
    built = [keys.task(o, t) for o, t in itertools.product(NASTY, NASTY)]
    built += [keys.context_tasks(o, c) for o, c in itertools.product(NASTY, NASTY)]
    built += [keys.context_tasks_by_state(o, c) for o, c in itertools.product(NASTY, NASTY)]
    built += [keys.owner_tasks(o) for o in NASTY]
    built += [keys.owner_tasks_by_state(o) for o in NASTY]
    assert len(set(built)) == len(built)
    # "a:b" + "c" must not meet "a" + "b:c"
    assert keys.task("a:b", "c") != keys.task("a", "b:c")


def test_lease_members_round_trip() -> None:
    for owner, task_id in itertools.product(NASTY, NASTY):
        member = RedisKeys.lease_member(owner, task_id)
        assert RedisKeys.parse_lease_member(member) == (owner, task_id)


@pytest.mark.parametrize("prefix", ["", "a{b", "a}b"])
def test_prefix_may_not_move_the_hash_tag(prefix: str) -> None:
    with pytest.raises(ValueError, match="prefix"):
        RedisKeys(prefix)


def test_a_tenant_qualified_owner_keeps_one_tag_and_keys_of_its_own() -> None:
    """Tenants need no key of their own: the owner is tenant-qualified (stores.tenants), so an
    owner's list indexes stay in one slot, a task's and a conversation's keys in theirs, and no
    key of one tenant is a key of another or of no tenant; a lease member gives the tenant back
    (a takeover knows the tenant of the turn it takes)."""
    keys = RedisKeys("a2a")
    principals = ["anonymous", "api-key:alice", "jwt:a/b", "jwt:acme/x"]
    owners = [tenant_owner(tenant, p) for tenant in (None, "acme", "beta") for p in principals]
    assert len(set(owners)) == len(owners)
    built = []
    for owner in owners:
        per_owner = [keys.owner_tasks(owner), keys.context_tasks(owner, "ctx-1")]
        assert {hash_tag(key) for key in per_owner} == {encode(owner)}
        of_task = [keys.task(owner, "t-1"), keys.journal(owner, "t-1"), keys.lease(owner, "t-1")]
        assert len({key_slot(key.encode()) for key in of_task}) == 1
        of_context = [keys.conversation(owner, "ctx-1"), keys.claim(owner, "ctx-1")]
        assert {hash_tag(key) for key in of_context} == {"ctx-1"}
        built += per_owner + of_task + of_context + [keys.units(owner, "ctx-1")]
        built.append(keys.rate_bucket(owner))
        member_owner, _ = RedisKeys.parse_lease_member(RedisKeys.lease_member(owner, "t-1"))
        assert tenant_of(member_owner) == tenant_of(owner)
    assert len(set(built)) == len(built), "two owners share a key"
