"""Migration 2: the fenced writes as functions in the database, one statement (one round trip,
no BEGIN/COMMIT: a statement is its own transaction) per write, as the Redis scripts are.

Each function checks what its write depends on (the lease's holder and epoch, the claim, the
task's position and state) in the statement that writes, with the rows locked in the order
every writer takes them (the lease row `FOR SHARE`, then the task or claim row `FOR UPDATE`): a
takeover (which updates the lease row) waits for the write to commit, and the write is wholly
before it or refused after it. A refused write writes nothing and says why (`outcome`); the
store raises the matching error. plpgsql runs each statement on a fresh snapshot (READ
COMMITTED), as the stores' transactions did.

Forward only: a released function never changes; a new behaviour is a new function (a new
migration), and older replicas keep calling the old one during a rolling deploy.
"""

from __future__ import annotations

WRITE_FUNCTIONS = """
-- A task's first snapshot and journal entry. outcome: 'ok', 'lease' (the fence lost), 'voided'.
CREATE FUNCTION a2a_create_task(
    p_owner text, p_task text, p_context text, p_state text, p_status_ms bigint,
    p_status_us bigint, p_snapshot bytea, p_ttl_s double precision, p_event bytea,
    p_holder text, p_epoch bigint,
    OUT outcome text, OUT voided_by text
) LANGUAGE plpgsql AS $$
DECLARE
    v_holder text;
    v_epoch bigint;
BEGIN
    IF p_holder IS NOT NULL THEN
        SELECT l.holder, l.epoch, l.voided_by INTO v_holder, v_epoch, voided_by FROM leases l
        WHERE l.owner = p_owner AND l.task_id = p_task AND l.expires_at > now() FOR SHARE;
        IF voided_by IS NOT NULL THEN
            outcome := 'voided';
            RETURN;
        END IF;
        IF v_holder IS DISTINCT FROM p_holder OR v_epoch IS DISTINCT FROM p_epoch THEN
            outcome := 'lease';
            RETURN;
        END IF;
    END IF;
    -- A task created again (an expired one's id) starts over, as on Redis.
    DELETE FROM tasks WHERE owner = p_owner AND task_id = p_task;
    INSERT INTO tasks (owner, task_id, context_id, state, status_ms, status_us, snapshot,
                       snapshot_position, position, expires_at)
    VALUES (p_owner, p_task, p_context, p_state, p_status_ms, p_status_us, p_snapshot, 1, 1,
            now() + make_interval(secs => p_ttl_s));
    INSERT INTO journal (owner, task_id, position, event, epoch)
    VALUES (p_owner, p_task, 1, p_event, p_epoch);
    outcome := 'ok';
END
$$;

-- Journal entries after the task's last position, and the snapshot if one is given (p_snapshot
-- not NULL), in the Redis script's order of checks. outcome: 'ok' (task_position: the last
-- position written), 'retry' (p_event_id was the last write's: its position), 'gone', 'lease',
-- 'position' (task_position: the current one), 'state'. Its notification is sent after it
-- commits (stores.postgres.announcements says why).
CREATE FUNCTION a2a_publish(
    p_owner text, p_task text, p_events bytea[], p_holder text, p_epoch bigint,
    p_event_id text, p_ttl_s double precision, p_if_position bigint,
    p_if_state text, p_journal_max bigint, p_trim_every bigint, p_snapshot bytea,
    p_context text, p_state text, p_status_ms bigint, p_status_us bigint,
    OUT outcome text, OUT task_position bigint
) LANGUAGE plpgsql AS $$
DECLARE
    v_holder text;
    v_epoch bigint;
    v_before bigint;
    v_state text;
    v_last_id text;
    v_last_position bigint;
    v_last bigint;
BEGIN
    IF p_holder IS NOT NULL THEN  -- the lease first: every writer takes it before the task row
        SELECT l.holder, l.epoch INTO v_holder, v_epoch FROM leases l
        WHERE l.owner = p_owner AND l.task_id = p_task AND l.expires_at > now() FOR SHARE;
    END IF;
    SELECT t.position, t.state, t.last_event_id, t.last_event_position
    INTO v_before, v_state, v_last_id, v_last_position FROM tasks t
    WHERE t.owner = p_owner AND t.task_id = p_task AND t.expires_at > now() FOR UPDATE;
    IF NOT FOUND THEN
        outcome := 'gone';
        RETURN;
    END IF;
    IF p_event_id <> '' AND v_last_id = p_event_id THEN
        outcome := 'retry';
        task_position := v_last_position;
        RETURN;
    END IF;
    IF p_holder IS NOT NULL
       AND (v_holder IS DISTINCT FROM p_holder OR v_epoch IS DISTINCT FROM p_epoch) THEN
        outcome := 'lease';
        RETURN;
    END IF;
    IF p_if_position IS NOT NULL AND v_before <> p_if_position THEN
        outcome := 'position';
        task_position := v_before;
        RETURN;
    END IF;
    IF p_if_state IS NOT NULL AND v_state <> p_if_state THEN
        outcome := 'state';
        RETURN;
    END IF;
    v_last := v_before + cardinality(p_events);
    INSERT INTO journal (owner, task_id, position, event, epoch)
    SELECT p_owner, p_task, v_before + n, event, p_epoch
    FROM unnest(p_events) WITH ORDINALITY AS e(event, n);
    UPDATE tasks SET
        position = v_last,
        last_event_id = coalesce(p_event_id, last_event_id),
        last_event_position = CASE WHEN p_event_id IS NULL THEN last_event_position
                                   ELSE v_last END,
        expires_at = now() + make_interval(secs => p_ttl_s),
        snapshot = coalesce(p_snapshot, snapshot),
        snapshot_position = CASE WHEN p_snapshot IS NULL THEN snapshot_position
                                 ELSE v_last END,
        context_id = coalesce(p_context, context_id),
        state = coalesce(p_state, state),
        status_ms = coalesce(p_status_ms, status_ms),
        status_us = coalesce(p_status_us, status_us)
    WHERE owner = p_owner AND task_id = p_task;
    -- A long journal keeps its last p_journal_max entries, trimmed every p_trim_every positions.
    IF v_last > p_journal_max AND v_last / p_trim_every <> v_before / p_trim_every THEN
        DELETE FROM journal
        WHERE owner = p_owner AND task_id = p_task AND position <= v_last - p_journal_max;
    END IF;
    outcome := 'ok';
    task_position := v_last;
END
$$;

-- A context's claim taken by a task (stores.postgres.messages has the rules). outcome: 'ok',
-- 'held' (by held_task, fenced or not), 'lease' (a later fence holds it).
CREATE FUNCTION a2a_claim(
    p_owner text, p_context text, p_task text, p_ttl_s double precision, p_holder text,
    p_epoch bigint,
    OUT outcome text, OUT held_task text, OUT held_fenced boolean
) LANGUAGE plpgsql AS $$
DECLARE
    v_fence_holder text;
    v_fence_epoch bigint;
BEGIN
    -- Made if missing and locked in one step (a release may delete it meanwhile otherwise).
    INSERT INTO claims AS c (owner, context_id, expires_at)
    VALUES (p_owner, p_context, now() + make_interval(secs => p_ttl_s))
    ON CONFLICT (owner, context_id) DO UPDATE SET expires_at = c.expires_at
    RETURNING CASE WHEN c.expires_at > now() THEN c.task_id END, c.fence_holder, c.fence_epoch
    INTO held_task, v_fence_holder, v_fence_epoch;
    IF held_task IS NOT NULL AND held_task <> p_task THEN
        outcome := 'held';
        held_fenced := v_fence_epoch IS NOT NULL;
        RETURN;
    END IF;
    IF p_holder IS NULL THEN
        IF held_task IS NULL THEN
            UPDATE claims SET task_id = p_task, fence_holder = NULL, fence_epoch = NULL,
                expires_at = now() + make_interval(secs => p_ttl_s)
            WHERE owner = p_owner AND context_id = p_context;
        END IF;
        outcome := 'ok';
        held_task := NULL;
        RETURN;
    END IF;
    IF held_task IS NOT NULL AND v_fence_epoch IS NOT NULL AND v_fence_epoch >= p_epoch
       AND NOT (v_fence_epoch = p_epoch AND v_fence_holder = p_holder) THEN
        outcome := 'lease';
        RETURN;
    END IF;
    UPDATE claims SET task_id = p_task, fence_holder = p_holder, fence_epoch = p_epoch,
        expires_at = now() + make_interval(secs => p_ttl_s)
    WHERE owner = p_owner AND context_id = p_context;
    outcome := 'ok';
    held_task := NULL;
END
$$;

-- A unit of messages appended to a context's conversation once, and the last p_window
-- messages before it. A fenced append (p_task not NULL) is admitted by the claim as a2a_claim
-- admits, and keeps the claim as long as the conversation (recording a later fence). outcome:
-- 'ok' (added: whether the unit was new), 'lease'.
CREATE FUNCTION a2a_append_messages(
    p_owner text, p_context text, p_unit text, p_messages bytea[], p_window integer,
    p_ttl_s double precision, p_task text, p_holder text, p_epoch bigint,
    OUT outcome text, OUT added boolean, OUT before bytea[]
) LANGUAGE plpgsql AS $$
DECLARE
    v_claim_task text;
    v_fence_holder text;
    v_fence_epoch bigint;
    v_length bigint;
BEGIN
    IF p_task IS NOT NULL THEN
        SELECT CASE WHEN c.expires_at > now() THEN c.task_id END, c.fence_holder, c.fence_epoch
        INTO v_claim_task, v_fence_holder, v_fence_epoch FROM claims c
        WHERE c.owner = p_owner AND c.context_id = p_context FOR UPDATE;
        IF v_claim_task IS DISTINCT FROM p_task
           OR (v_fence_epoch >= p_epoch
               AND NOT (v_fence_epoch = p_epoch AND v_fence_holder = p_holder)) THEN
            outcome := 'lease';
            RETURN;
        END IF;
        UPDATE claims SET fence_holder = p_holder,
            fence_epoch = CASE WHEN fence_epoch IS NULL OR fence_epoch < p_epoch THEN p_epoch
                               ELSE fence_epoch END,
            expires_at = now() + make_interval(secs => p_ttl_s)
        WHERE owner = p_owner AND context_id = p_context;
    END IF;
    -- The conversation's row, made or refreshed and locked (an expired one starts over).
    INSERT INTO conversations AS c (owner, context_id, expires_at)
    VALUES (p_owner, p_context, now() + make_interval(secs => p_ttl_s))
    ON CONFLICT (owner, context_id) DO UPDATE SET expires_at = EXCLUDED.expires_at,
        length = CASE WHEN c.expires_at > now() THEN c.length ELSE -1 END
    RETURNING c.length INTO v_length;
    IF v_length < 0 THEN  -- expired, not yet swept: its messages and units go
        DELETE FROM messages WHERE owner = p_owner AND context_id = p_context;
        DELETE FROM message_units WHERE owner = p_owner AND context_id = p_context;
        UPDATE conversations SET length = 0 WHERE owner = p_owner AND context_id = p_context;
        v_length := 0;
    END IF;
    IF p_window > 0 AND v_length > 0 THEN
        SELECT array_agg(w.message ORDER BY w.seq) INTO before FROM (
            SELECT m.seq, m.message FROM messages m
            WHERE m.owner = p_owner AND m.context_id = p_context
            ORDER BY m.seq DESC LIMIT p_window) w;
    END IF;
    INSERT INTO message_units (owner, context_id, unit_id) VALUES (p_owner, p_context, p_unit)
    ON CONFLICT DO NOTHING;
    added := FOUND;
    IF added AND cardinality(p_messages) > 0 THEN
        INSERT INTO messages (owner, context_id, seq, message)
        SELECT p_owner, p_context, v_length + n, message
        FROM unnest(p_messages) WITH ORDINALITY AS m(message, n);
        UPDATE conversations SET length = v_length + cardinality(p_messages)
        WHERE owner = p_owner AND context_id = p_context;
    END IF;
    outcome := 'ok';
END
$$;
"""
"""Migration 2's SQL."""
