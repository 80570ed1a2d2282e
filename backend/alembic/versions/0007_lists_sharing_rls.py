"""lists, shared by invitation; each reader's own task numbers; row-level security on every
table that holds people's rows, for the roles the service acts as

Revision ID: 0007
Revises: 0006

The service never reads or writes people's rows as the role it logs in as (a superuser in
development and the tests, which row-level security would not hold): its pool's sessions
start as `todo_agent_app` (no BYPASSRLS), and every transaction names its acting user with
`set_config('todo_agent.user_id', ..., true)`, local to the transaction. The policies read
that setting. Background work runs as `todo_agent_worker`, which sees only the tables it
tends. The few functions that must see past the acting user (membership, numbering, events
to every member, invitations) are SECURITY DEFINER with a pinned search_path, owned by
`todo_agent_definer`, which the service never becomes.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APP, WORKER, DEFINER = "todo_agent_app", "todo_agent_worker", "todo_agent_definer"
_NOW = sa.text("now()")

# Roles are the cluster's, shared by its databases: made once, by whichever migration (or
# concurrent test worker) gets there first. The service's login becomes the first two; the
# third only owns the definer functions (giving them away takes membership). A superuser
# is a member of every role already.
_ROLES = """
DO $$
DECLARE
    name text;
BEGIN
    FOREACH name IN ARRAY ARRAY['todo_agent_app', 'todo_agent_worker', 'todo_agent_definer']
    LOOP
        BEGIN
            EXECUTE format('CREATE ROLE %I NOLOGIN NOBYPASSRLS', name);
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END;
        IF NOT pg_has_role(current_user, name, 'MEMBER') THEN
            EXECUTE format('GRANT %I TO %I', name, current_user);
        END IF;
    END LOOP;
END
$$
"""

# -- who may reach what: one rule, in one place ------------------------------------------

_ACTING_USER = """
CREATE FUNCTION todo_acting_user() RETURNS text LANGUAGE sql STABLE AS $$
    SELECT nullif(current_setting('todo_agent.user_id', true), '')
$$
"""

# The lists the acting user is a member of with at least `wanted` (viewer < editor < owner).
# SECURITY DEFINER: the policies of list_members would otherwise re-enter themselves.
_MY_LISTS = """
CREATE FUNCTION todo_my_lists(wanted text DEFAULT 'viewer') RETURNS SETOF uuid
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT list_id FROM list_members
    WHERE user_id = (SELECT todo_acting_user())
      AND (wanted = 'viewer' OR role = 'owner' OR (wanted = 'editor' AND role = 'editor'))
$$
"""

_OWNED_LISTS = """
CREATE FUNCTION todo_owned_lists() RETURNS SETOF uuid
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT id FROM lists WHERE owner_id = (SELECT todo_acting_user())
$$
"""

# The acting user's Inbox, made on first use (two first uses at once make one).
_INBOX = """
CREATE FUNCTION todo_inbox() RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    me text := todo_acting_user();
    found uuid;
BEGIN
    SELECT id INTO found FROM lists WHERE owner_id = me AND inbox;
    IF found IS NULL THEN
        INSERT INTO lists (id, owner_id, name, inbox) VALUES (gen_random_uuid(), me, 'Inbox', true)
        ON CONFLICT (owner_id) WHERE inbox DO NOTHING
        RETURNING id INTO found;
        IF found IS NULL THEN
            SELECT id INTO found FROM lists WHERE owner_id = me AND inbox;
        ELSE
            INSERT INTO list_members (list_id, user_id, role) VALUES (found, me, 'owner');
        END IF;
    END IF;
    RETURN found;
END
$$
"""

# The members of a list the acting user is a member of, with the names they go by.
_MEMBERS = """
CREATE FUNCTION todo_list_members(list uuid)
RETURNS TABLE (user_id text, display_name text, role text, joined_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT m.user_id, COALESCE(u.display_name, u.name), m.role, m.joined_at
    FROM list_members m JOIN users u ON u.id = m.user_id
    WHERE m.list_id = list AND list IN (SELECT todo_my_lists())
    ORDER BY m.role = 'owner' DESC, m.joined_at, m.user_id
$$
"""

# An invitation taken by the acting user: good once (deleted as it is taken), until it
# expires. 'owner' when the owner took their own (it stays unused), NULL when there is no
# such invitation; else the role the acting user now has (a member keeps a higher one).
_ACCEPT = """
CREATE FUNCTION todo_accept_invitation(hashed text, OUT list uuid, OUT outcome text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    me text := todo_acting_user();
    invitation list_invitations;
BEGIN
    SELECT * INTO invitation FROM list_invitations
    WHERE token_hash = hashed AND expires_at > now() FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    list := invitation.list_id;
    IF EXISTS (SELECT FROM lists WHERE id = list AND owner_id = me) THEN
        outcome := 'owner';
        RETURN;
    END IF;
    DELETE FROM list_invitations WHERE token_hash = hashed;
    INSERT INTO list_members (list_id, user_id, role) VALUES (list, me, invitation.role)
    ON CONFLICT (list_id, user_id) DO UPDATE SET role = CASE
        WHEN list_members.role = 'viewer' THEN EXCLUDED.role ELSE list_members.role END;
    SELECT role INTO outcome FROM list_members WHERE list_id = list AND user_id = me;
END
$$
"""

# Whose an approval id is, when it is not the acting user's (their own they read through
# the policy): tells "another user's" (404) from "unknown" (409).
_APPROVAL_OWNER = """
CREATE FUNCTION todo_approval_owner(approval text) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT user_id FROM approvals WHERE id = approval
$$
"""

# The user whose calendar feed this secret opens (the feed has no bearer token).
_CALENDAR_OWNER = """
CREATE FUNCTION todo_calendar_owner(hashed text) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT id FROM users WHERE calendar_secret_hash = hashed
$$
"""

# -- numbers: each reader's own ----------------------------------------------------------

# A task gets a number from the counter of each member of its list who has none for it
# yet: when it is made, and when it moves to a list with other members. Counters are taken
# in user id order (two tasks made at once in one shared list cannot deadlock) and only
# grow, so a number is never reused. Runs first of the task triggers (by name).
_TASK_NUMBERS = """
CREATE FUNCTION tasks_allot_numbers() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    wanting text[];
BEGIN
    SELECT array_agg(m.user_id ORDER BY m.user_id) INTO wanting FROM list_members m
    WHERE m.list_id = NEW.list_id
      AND NOT EXISTS (SELECT FROM task_numbers n
                      WHERE n.user_id = m.user_id AND n.task_id = NEW.id);
    IF wanting IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM 1 FROM users WHERE id = ANY(wanting) ORDER BY id FOR NO KEY UPDATE;
    WITH drawn AS (
        UPDATE users SET task_seq = task_seq + 1 WHERE id = ANY(wanting) RETURNING id, task_seq
    )
    INSERT INTO task_numbers (user_id, task_id, number) SELECT id, NEW.id, task_seq FROM drawn;
    RETURN NULL;
END
$$
"""

# A new member gets numbers for every task of the list they have none for, in the order of
# the owner's numbers (the order they were made in; one who comes back finds their old
# numbers).
_MEMBER_NUMBERS = """
CREATE FUNCTION list_members_allot_numbers() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM 1 FROM users WHERE id = NEW.user_id FOR NO KEY UPDATE;
    WITH missing AS (
        SELECT t.id, row_number() OVER (ORDER BY owners.number, t.created_at, t.id) AS n
        FROM tasks t
        JOIN lists l ON l.id = t.list_id
        LEFT JOIN task_numbers owners ON owners.task_id = t.id AND owners.user_id = l.owner_id
        WHERE t.list_id = NEW.list_id
          AND NOT EXISTS (SELECT FROM task_numbers x
                          WHERE x.user_id = NEW.user_id AND x.task_id = t.id)
    ), counted AS (
        SELECT count(*) AS total FROM missing
    ), drawn AS (
        UPDATE users SET task_seq = task_seq + (SELECT total FROM counted)
        WHERE id = NEW.user_id AND (SELECT total FROM counted) > 0
        RETURNING task_seq AS top
    )
    INSERT INTO task_numbers (user_id, task_id, number)
    SELECT NEW.user_id, missing.id, drawn.top - counted.total + missing.n
    FROM missing, counted, drawn;
    RETURN NULL;
END
$$
"""

# -- events: one per change per member ---------------------------------------------------

# One event for one recipient. The recipient's row is locked before an id is drawn, so a
# user's events commit in id order (Last-Event-ID resume cannot skip one); NOTIFY is
# delivered at commit, to every replica's listener.
_WRITE_ONE = """
CREATE FUNCTION todo_write_event(recipient text, kind text, about uuid, body jsonb)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM 1 FROM users WHERE id = recipient FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN;  -- the user is being erased
    END IF;
    INSERT INTO events (user_id, type, subject, data)
        VALUES (recipient, kind, about, jsonb_build_object('user_id', recipient) || body);
    PERFORM pg_notify('todo_agent_events', recipient);
END
$$
"""

# A task as events show it to one reader: their number; steps in the trash not counted.
_TASK_JSON = """
CREATE OR REPLACE FUNCTION task_event_json(t tasks, reader_number integer) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', t.id, 'number', reader_number, 'title', t.title, 'description', t.description,
        'completed', t.completed, 'completed_at', t.completed_at, 'due_at', t.due_at,
        'priority', t.priority, 'tags', to_jsonb(t.tags), 'created_at', t.created_at,
        'updated_at', t.updated_at, 'parent_id', t.parent_id, 'list_id', t.list_id,
        'assignee_id', t.assignee_id,
        'steps_done', (SELECT count(*) FROM tasks s
                       WHERE s.list_id = t.list_id AND s.parent_id = t.id AND s.completed
                         AND s.deleted_at IS NULL),
        'steps_total', (SELECT count(*) FROM tasks s
                        WHERE s.list_id = t.list_id AND s.parent_id = t.id
                          AND s.deleted_at IS NULL),
        'recurrence', t.recurrence, 'recurrence_text', t.recurrence_text,
        'remind_at', t.remind_at, 'reminded_at', t.reminded_at, 'series_id', t.series_id)
$$
"""

# Every committed change to a task writes, in its transaction, one event for each member
# of its list, with that member's number (a reminder: one, to whom it is for: the assignee,
# else the creator, else the list's owner). A task moved away from some members is
# `task.deleted` for them. Trash and purge as in 0006.
_WRITE_EVENT = """
CREATE OR REPLACE FUNCTION tasks_write_event() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    kind text;
    t tasks;
    reader record;
    for_whom text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.deleted_at IS NOT NULL THEN
            RETURN NULL;
        END IF;
        t := OLD;
        kind := 'task.deleted';
    ELSE
        t := NEW;
        IF TG_OP = 'INSERT' THEN
            kind := 'task.created';
        ELSIF NEW.deleted_at IS NOT NULL AND OLD.deleted_at IS NULL THEN
            kind := 'task.deleted';
        ELSIF NEW.deleted_at IS NULL AND OLD.deleted_at IS NOT NULL THEN
            kind := 'task.restored';
        ELSIF NEW.deleted_at IS NOT NULL THEN
            RETURN NULL;
        ELSIF NEW.completed AND NOT OLD.completed THEN
            kind := 'task.completed';
        ELSIF OLD.completed AND NOT NEW.completed THEN
            kind := 'task.reopened';
        ELSIF (NEW.title, NEW.description, NEW.due_at, NEW.priority, NEW.tags, NEW.recurrence,
               NEW.remind_at, NEW.parent_id, NEW.list_id, NEW.assignee_id)
              IS DISTINCT FROM
              (OLD.title, OLD.description, OLD.due_at, OLD.priority, OLD.tags, OLD.recurrence,
               OLD.remind_at, OLD.parent_id, OLD.list_id, OLD.assignee_id) THEN
            kind := 'task.updated';
        ELSIF NEW.reminded_at IS NOT NULL AND OLD.reminded_at IS NULL THEN
            kind := 'reminder.due';
            for_whom := COALESCE(NEW.assignee_id, NEW.created_by,
                                 (SELECT owner_id FROM lists WHERE id = NEW.list_id));
        ELSE
            RETURN NULL;
        END IF;
    END IF;
    FOR reader IN
        SELECT m.user_id, n.number FROM list_members m
        LEFT JOIN task_numbers n ON n.user_id = m.user_id AND n.task_id = t.id
        WHERE m.list_id = t.list_id AND (for_whom IS NULL OR m.user_id = for_whom)
        ORDER BY m.user_id
    LOOP
        IF kind = 'task.deleted' THEN
            PERFORM todo_write_event(reader.user_id, kind, t.id, jsonb_build_object('task',
                jsonb_build_object('id', t.id, 'number', reader.number, 'title', t.title)));
        ELSIF kind = 'reminder.due' THEN
            PERFORM todo_write_event(reader.user_id, kind, t.id, jsonb_build_object(
                'task', task_event_json(t, reader.number),
                'remind_at', t.remind_at,
                'late', t.reminded_at - t.remind_at > make_interval(secs => coalesce(
                    nullif(current_setting('todo_agent.late_after_s', true), ''), '5')::float8)));
        ELSE
            PERFORM todo_write_event(reader.user_id, kind, t.id,
                                     jsonb_build_object('task', task_event_json(t, reader.number)));
        END IF;
    END LOOP;
    IF TG_OP = 'UPDATE' AND NEW.list_id <> OLD.list_id AND NEW.deleted_at IS NULL THEN
        FOR reader IN
            SELECT m.user_id, n.number FROM list_members m
            LEFT JOIN task_numbers n ON n.user_id = m.user_id AND n.task_id = t.id
            WHERE m.list_id = OLD.list_id
              AND m.user_id NOT IN (SELECT user_id FROM list_members WHERE list_id = NEW.list_id)
            ORDER BY m.user_id
        LOOP
            PERFORM todo_write_event(reader.user_id, 'task.deleted', t.id, jsonb_build_object(
                'task', jsonb_build_object('id', t.id, 'number', reader.number, 'title', t.title)));
        END LOOP;
    END IF;
    RETURN NULL;
END
$$
"""

# A list's own events (list.created, list.updated, list.deleted, list.member_added,
# list.member_removed), to each member, and to `also` (the member just removed). Only a
# member of the list may write them.
_LIST_EVENT = """
CREATE FUNCTION todo_list_event(
    list uuid, kind text, also text DEFAULT NULL, extra jsonb DEFAULT '{}'
) RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    reader record;
    shown lists;
BEGIN
    IF list NOT IN (SELECT todo_my_lists()) THEN
        RAISE EXCEPTION 'not a member of list %', list USING ERRCODE = 'insufficient_privilege';
    END IF;
    SELECT * INTO shown FROM lists WHERE id = list;
    FOR reader IN
        SELECT m.user_id, m.role FROM list_members m WHERE m.list_id = list
        UNION SELECT also, NULL WHERE also IS NOT NULL
              AND also NOT IN (SELECT user_id FROM list_members WHERE list_id = list)
        ORDER BY 1
    LOOP
        PERFORM todo_write_event(reader.user_id, kind, list, jsonb_build_object('list',
            jsonb_build_object('id', shown.id, 'name', shown.name, 'owner_id', shown.owner_id,
                               'role', reader.role)) || extra);
    END LOOP;
END
$$
"""

# -- the record of what a turn changed (0006), by the acting user ------------------------

_TASK_STATE = """
CREATE OR REPLACE FUNCTION task_state(t tasks) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_build_object(
        'title', t.title, 'description', t.description, 'completed', t.completed,
        'completed_at', t.completed_at, 'due_at', t.due_at, 'priority', t.priority,
        'tags', to_jsonb(t.tags), 'recurrence', t.recurrence, 'remind_at', t.remind_at,
        'parent_id', t.parent_id, 'deleted_at', t.deleted_at, 'list_id', t.list_id,
        'assignee_id', t.assignee_id)
$$
"""

# A step's parent is a top-level task (in the step's list: the foreign key says so).
_ONE_LEVEL = """
CREATE OR REPLACE FUNCTION tasks_steps_have_no_steps() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.parent_id IS NOT NULL AND (
        EXISTS (SELECT FROM tasks
                WHERE list_id = NEW.list_id AND id = NEW.parent_id AND parent_id IS NOT NULL)
        OR EXISTS (SELECT FROM tasks WHERE list_id = NEW.list_id AND parent_id = NEW.id)
    ) THEN
        RAISE EXCEPTION 'a step cannot have steps' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$
"""

# -- a chat turn's two statements, as functions that name their acting user first --------

# The latest `want` messages of a session, newest first walked back by index probes (see
# backend/services/turns.py), oldest first in the answer. Every message, the newest too, is
# found by the same probe (the one before a number, from a start past any number): its
# plan cannot read the whole session, as `ORDER BY seq DESC LIMIT 1` alone may on a
# generic plan that guesses one row of the session is the user's (tests/test_sql_budget.py).
# PL/pgSQL, not SQL: a SQL function that cannot be inlined is planned again at every call
# (0.2 ms a turn); PL/pgSQL keeps its statements' plans for the connection.
_HISTORY = """
CREATE FUNCTION todo_history(session uuid, want integer) RETURNS json
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT COALESCE(json_agg(h ORDER BY h.seq), '[]') FROM (
        WITH RECURSIVE back AS (
            SELECT 0 AS n, 9223372036854775807::bigint AS seq, (NULL::agent_messages).id,
                   (NULL::agent_messages).role, (NULL::agent_messages).content,
                   (NULL::agent_messages).tool_calls, (NULL::agent_messages).tool_results
            UNION ALL
            SELECT back.n + 1, earlier.*
            FROM back, LATERAL (
                SELECT seq, id, role, content, tool_calls, tool_results
                FROM agent_messages
                WHERE session_id = session AND seq < back.seq
                ORDER BY seq DESC LIMIT 1
            ) AS earlier
            WHERE back.n < want
        )
        SELECT seq, id, role, content, tool_calls, tool_results FROM back WHERE n > 0
    ) AS h);
END
$$
"""

# The start of a turn (turns.open_turn): the user's gate (rate limit: GCRA on `chat_tat`,
# under the user row's lock), the session's lease (an existing session of the user's, or a
# new one, bound to a chat id when given), then the history before the message, the message
# itself, and the session's held calls. Refused turns change nothing.
_OPEN_TURN = """
CREATE FUNCTION todo_open_turn(
    owner text, session uuid, is_new boolean, chat text, turn uuid, lease float8,
    spacing float8, tau float8, zone text, message uuid, content text, title text,
    adds boolean, want integer
) RETURNS TABLE (
    allowed boolean, name text, timezone text, instructions text, model text, confirm text,
    tokens_today bigint, retry_after_s float8, session_id uuid, session_found boolean,
    history json, held json
) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    gate record;
    taken uuid;
    fresh boolean := false;
BEGIN
    PERFORM set_config('todo_agent.user_id', owner, true);
    SELECT COALESCE(u.display_name, u.name) AS name, u.timezone, u.instructions, u.model,
           u.confirm, GREATEST(COALESCE(u.chat_tat, now()), now()) AS base,
           CASE WHEN u.tokens_day = CURRENT_DATE THEN u.tokens_used ELSE 0 END AS tokens_today
    INTO gate FROM users u WHERE u.id = owner FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    allowed := gate.base - now() <= make_interval(secs => tau);
    IF allowed AND is_new THEN
        INSERT INTO agent_sessions AS s (id, user_id, title, chat_id, lease_owner, lease_expires_at)
        VALUES (session, owner, title, chat, turn, now() + make_interval(secs => lease))
        ON CONFLICT (user_id, chat_id) WHERE chat_id IS NOT NULL DO UPDATE
        SET lease_owner = turn, lease_expires_at = now() + make_interval(secs => lease)
        WHERE s.lease_expires_at IS NULL OR s.lease_expires_at < now()
        RETURNING s.id, s.xmax = 0 INTO taken, fresh;  -- xmax 0: inserted, not updated
    ELSIF allowed THEN
        UPDATE agent_sessions s
        SET lease_owner = turn, lease_expires_at = now() + make_interval(secs => lease)
        WHERE s.id = session AND s.user_id = owner
          AND (s.lease_expires_at IS NULL OR s.lease_expires_at < now())
        RETURNING s.id INTO taken;
    END IF;
    IF taken IS NOT NULL THEN
        UPDATE users SET chat_tat = gate.base + make_interval(secs => spacing),
                         timezone = COALESCE(zone, users.timezone)
        WHERE id = owner;
        -- A session made just now has no history and holds no calls yet.
        history := CASE WHEN fresh THEN '[]' ELSE todo_history(taken, want) END;
        IF adds THEN
            INSERT INTO agent_messages (id, session_id, user_id, role, content, created_at)
            VALUES (message, taken, owner, 'user', content, clock_timestamp());
        END IF;
        IF NOT fresh THEN
            SELECT json_agg(a ORDER BY a.created_at) INTO held FROM (
                SELECT p.id, p.message_id, p.tool_call_id, p.name, p.arguments, p.summary,
                       p.created_at, p.expires_at <= now() AS expired
                FROM approvals p WHERE p.session_id = taken AND p.state = 'pending'
            ) AS a;
        END IF;
    END IF;
    name := gate.name;
    timezone := COALESCE(zone, gate.timezone);
    instructions := gate.instructions;
    model := gate.model;
    confirm := gate.confirm;
    tokens_today := gate.tokens_today;
    retry_after_s := EXTRACT(EPOCH FROM gate.base - now())::float8 - tau;
    session_id := taken;
    session_found := is_new OR taken IS NOT NULL OR EXISTS (
        SELECT FROM agent_sessions s WHERE s.id = session AND s.user_id = owner);
    RETURN NEXT;
END
$$
"""

# The end of a turn (turns.finish): the user's tokens of the day, the reply (completing the
# record its tool calls began), and the session: activity, token totals, and the lease,
# released if still this turn's. The user's row is locked before the session's, as
# todo_open_turn takes them (the other order deadlocks with a turn opening in the session).
_FINISH_TURN = """
CREATE FUNCTION todo_finish_turn(
    owner text, session uuid, message uuid, turn uuid, content text, stub boolean,
    prompt integer, completion integer, total integer, cached integer
) RETURNS timestamptz LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    replied timestamptz;
BEGIN
    PERFORM set_config('todo_agent.user_id', owner, true);
    -- One statement (one executor run) for the three writes; the user's row first.
    WITH spent AS (
        UPDATE users SET
            tokens_used = CASE WHEN tokens_day = CURRENT_DATE THEN tokens_used ELSE 0 END
                          + total,
            tokens_day = CURRENT_DATE
        WHERE id = owner
        RETURNING id
    ), reply AS (
        INSERT INTO agent_messages AS m (id, session_id, user_id, role, content, using_stub,
                                         prompt_tokens, completion_tokens, cached_tokens,
                                         created_at)
        VALUES (message, session, owner, 'assistant', content, stub, prompt, completion,
                cached, clock_timestamp())
        ON CONFLICT (id) DO UPDATE SET
            content = EXCLUDED.content, using_stub = EXCLUDED.using_stub,
            prompt_tokens = EXCLUDED.prompt_tokens,
            completion_tokens = EXCLUDED.completion_tokens,
            cached_tokens = EXCLUDED.cached_tokens
        RETURNING m.created_at
    )
    UPDATE agent_sessions s SET
        updated_at = now(),
        prompt_tokens = s.prompt_tokens + prompt,
        completion_tokens = s.completion_tokens + completion,
        total_tokens = s.total_tokens + total,
        cached_tokens = s.cached_tokens + cached,
        lease_owner = CASE WHEN s.lease_owner = turn THEN NULL ELSE s.lease_owner END,
        lease_expires_at = CASE WHEN s.lease_owner = turn THEN NULL ELSE s.lease_expires_at END
    FROM spent
    WHERE s.id = session AND s.user_id = owner
    RETURNING (SELECT created_at FROM reply) INTO replied;
    RETURN replied;  -- NULL: not the user's session
END
$$
"""

# -- the policies -------------------------------------------------------------------------

_ME = "(SELECT todo_acting_user())"
# Per table: (command, USING, WITH CHECK) for the service's role; None: not allowed.
_POLICIES: dict[str, list[tuple[str, str | None, str | None]]] = {
    "users": [("ALL", f"id = {_ME}", f"id = {_ME}")],
    "lists": [
        ("SELECT", f"id IN (SELECT todo_my_lists()) OR owner_id = {_ME}", None),
        ("INSERT", None, f"owner_id = {_ME}"),
        ("UPDATE", f"owner_id = {_ME}", f"owner_id = {_ME}"),
        ("DELETE", f"owner_id = {_ME}", None),
    ],
    "list_members": [
        ("SELECT", "list_id IN (SELECT todo_my_lists())", None),
        ("INSERT", None, "list_id IN (SELECT todo_owned_lists())"),
        (
            "UPDATE",
            "list_id IN (SELECT todo_owned_lists())",
            "list_id IN (SELECT todo_owned_lists())",
        ),
        ("DELETE", f"list_id IN (SELECT todo_owned_lists()) OR user_id = {_ME}", None),
    ],
    "list_invitations": [
        ("ALL", "list_id IN (SELECT todo_owned_lists())", "list_id IN (SELECT todo_owned_lists())")
    ],
    "tasks": [
        ("SELECT", "list_id IN (SELECT todo_my_lists())", None),
        ("INSERT", None, "list_id IN (SELECT todo_my_lists('editor'))"),
        (
            "UPDATE",
            "list_id IN (SELECT todo_my_lists('editor'))",
            "list_id IN (SELECT todo_my_lists('editor'))",
        ),
        ("DELETE", "list_id IN (SELECT todo_my_lists('editor'))", None),
    ],
    "task_numbers": [("SELECT", f"user_id = {_ME}", None)],
    "task_changes": [("ALL", f"user_id = {_ME}", f"user_id = {_ME}")],
    "approvals": [("ALL", f"user_id = {_ME}", f"user_id = {_ME}")],
    "agent_sessions": [("ALL", f"user_id = {_ME}", f"user_id = {_ME}")],
    "agent_messages": [("ALL", f"user_id = {_ME}", f"user_id = {_ME}")],
    "idempotency_keys": [("ALL", f"user_id = {_ME}", f"user_id = {_ME}")],
    "events": [("SELECT", f"user_id = {_ME}", None), ("DELETE", f"user_id = {_ME}", None)],
}
# What background work tends, as the worker: reminders fire on tasks (and lock the rows of
# those they are for, found through the task's list), webhooks and pruning work the outbox,
# retention purges the trash, expiry clears idempotency keys.
_WORKER_TABLES = {
    "tasks": "SELECT, UPDATE, DELETE",
    "lists": "SELECT",
    "users": "SELECT, UPDATE",
    "events": "SELECT, UPDATE, DELETE",
    "idempotency_keys": "SELECT, DELETE",
}
_USER_TABLES = list(_POLICIES)

_FUNCTIONS = [
    _ACTING_USER, _MY_LISTS, _OWNED_LISTS, _INBOX, _MEMBERS, _ACCEPT, _APPROVAL_OWNER,
    _CALENDAR_OWNER, _TASK_NUMBERS, _MEMBER_NUMBERS, _WRITE_ONE, _LIST_EVENT, _HISTORY,
    _OPEN_TURN, _FINISH_TURN,
]  # fmt: skip
_DEFINERS = [
    "todo_my_lists(text)", "todo_owned_lists()", "todo_list_members(uuid)",
    "todo_accept_invitation(text)", "todo_approval_owner(text)", "todo_calendar_owner(text)",
    "tasks_allot_numbers()", "list_members_allot_numbers()",
    "todo_write_event(text, text, uuid, jsonb)", "tasks_write_event()",
    "todo_list_event(uuid, text, text, jsonb)",
]  # fmt: skip


def upgrade() -> None:
    op.execute(_ROLES)
    op.execute(f"GRANT USAGE ON SCHEMA public TO {APP}, {WORKER}, {DEFINER}")
    op.execute(f"GRANT CREATE ON SCHEMA public TO {DEFINER}")
    _lists()
    _tasks()
    for function in _FUNCTIONS:
        op.execute(function)
    for function in (_TASK_JSON, _WRITE_EVENT, _TASK_STATE, _ONE_LEVEL):
        op.execute(function)
    op.execute("DROP FUNCTION task_event_json(tasks)")
    op.execute(
        "CREATE TRIGGER tasks_allot_numbers AFTER INSERT OR UPDATE OF list_id ON tasks "
        "FOR EACH ROW EXECUTE FUNCTION tasks_allot_numbers()"
    )
    op.execute(
        "CREATE TRIGGER list_members_allot_numbers AFTER INSERT ON list_members "
        "FOR EACH ROW EXECUTE FUNCTION list_members_allot_numbers()"
    )
    op.execute("ALTER TABLE tasks ENABLE TRIGGER USER")
    _grants()
    for table in _USER_TABLES:
        _protect(table)


def _lists() -> None:
    op.create_table(
        "lists",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column(
            "owner_id",
            sa.String(length=255),
            sa.ForeignKey("users.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("inbox", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
    )
    op.create_index(
        "ux_lists_owner_name", "lists", ["owner_id", sa.text("lower(name)")], unique=True
    )
    op.create_index(
        "ux_lists_owner_inbox",
        "lists",
        ["owner_id"],
        unique=True,
        postgresql_where=sa.text("inbox"),
    )
    op.create_table(
        "list_members",
        sa.Column(
            "list_id", sa.Uuid(), sa.ForeignKey("lists.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column(
            "user_id",
            sa.String(length=255),
            sa.ForeignKey("users.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("role", sa.String(length=10), nullable=False),
        sa.Column("joined_at", sa.DateTime(timezone=True), server_default=_NOW, nullable=False),
        sa.PrimaryKeyConstraint("list_id", "user_id"),
        sa.CheckConstraint("role IN ('owner', 'editor', 'viewer')", name="ck_list_members_role"),
    )
    op.create_index("ix_list_members_user", "list_members", ["user_id", "list_id"])
    op.create_table(
        "list_invitations",
        sa.Column("token_hash", sa.String(length=64), primary_key=True),
        sa.Column(
            "list_id", sa.Uuid(), sa.ForeignKey("lists.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("role", sa.String(length=10), nullable=False),
        sa.Column(
            "created_by",
            sa.String(length=255),
            sa.ForeignKey("users.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("role IN ('editor', 'viewer')", name="ck_list_invitations_role"),
    )
    op.create_index("ix_list_invitations_list", "list_invitations", ["list_id"])
    op.create_index("ix_list_invitations_created_by", "list_invitations", ["created_by"])


def _tasks() -> None:
    """Tasks move from their user to a list (each user's own Inbox, for what exists), and
    their numbers to task_numbers; the creator stays as `created_by`."""
    op.execute("ALTER TABLE tasks DISABLE TRIGGER USER")  # moving rows is not news
    op.execute(
        "INSERT INTO lists (id, owner_id, name, inbox) "
        "SELECT gen_random_uuid(), id, 'Inbox', true FROM users"
    )
    op.execute(
        "INSERT INTO list_members (list_id, user_id, role) SELECT id, owner_id, 'owner' FROM lists"
    )
    op.add_column("tasks", sa.Column("list_id", sa.Uuid(), nullable=True))
    op.add_column(
        "tasks",
        sa.Column(
            "assignee_id",
            sa.String(length=255),
            sa.ForeignKey("users.id", ondelete="SET NULL", name="fk_tasks_assignee"),
            nullable=True,
        ),
    )
    op.execute("UPDATE tasks SET list_id = l.id FROM lists l WHERE l.owner_id = tasks.user_id")
    op.create_table(
        "task_numbers",
        sa.Column(
            "user_id",
            sa.String(length=255),
            sa.ForeignKey("users.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column(
            "task_id", sa.Uuid(), sa.ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", "task_id"),
        sa.UniqueConstraint("user_id", "number", name="uq_task_numbers_user_number"),
    )
    op.create_index("ix_task_numbers_task", "task_numbers", ["task_id"])
    op.execute(
        "INSERT INTO task_numbers (user_id, task_id, number) SELECT user_id, id, number FROM tasks"
    )
    op.alter_column("tasks", "list_id", nullable=False)
    op.create_foreign_key(
        "fk_tasks_list", "tasks", "lists", ["list_id"], ["id"], ondelete="CASCADE"
    )
    op.drop_constraint("fk_tasks_parent", "tasks", type_="foreignkey")
    op.drop_constraint("uq_tasks_user_id", "tasks", type_="unique")
    for index in ("uq_tasks_user_number", "ix_tasks_user_status_due", "ix_tasks_user_parent",
                  "ix_tasks_user_trash"):  # fmt: skip
        op.drop_index(index, table_name="tasks")
    op.drop_column("tasks", "number")
    op.drop_constraint("tasks_user_id_fkey", "tasks", type_="foreignkey")
    op.alter_column("tasks", "user_id", new_column_name="created_by", nullable=True)
    op.create_foreign_key(
        "fk_tasks_created_by", "tasks", "users", ["created_by"], ["id"], ondelete="SET NULL"
    )
    op.create_unique_constraint("uq_tasks_list_id", "tasks", ["list_id", "id"])
    # A step is in its parent's list: moving the task moves its steps (ON UPDATE CASCADE).
    op.create_foreign_key(
        "fk_tasks_parent",
        "tasks",
        "tasks",
        ["list_id", "parent_id"],
        ["list_id", "id"],
        ondelete="CASCADE",
        onupdate="CASCADE",
    )
    # Live tasks only: every read of a list's tasks by state or due date is of live ones,
    # and a count of a reader's tasks is read from it alone (an index-only scan).
    op.create_index(
        "ix_tasks_list_status_due",
        "tasks",
        ["list_id", "completed", "due_at"],
        postgresql_where=sa.text("deleted_at IS NULL"),
    )
    op.create_index("ix_tasks_list_parent", "tasks", ["list_id", "parent_id"])
    op.create_index(
        "ix_tasks_list_trash",
        "tasks",
        ["list_id", "deleted_at"],
        postgresql_where=sa.text("deleted_at IS NOT NULL"),
    )
    op.create_index("ix_tasks_created_by", "tasks", ["created_by"])
    op.create_index("ix_tasks_assignee", "tasks", ["assignee_id"])


def _grants() -> None:
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {APP}")
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {DEFINER}")
    op.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {APP}, {DEFINER}")
    for table, privileges in _WORKER_TABLES.items():
        op.execute(f"GRANT {privileges} ON {table} TO {WORKER}")
    op.execute(f"GRANT SELECT ON SEQUENCE events_id_seq TO {WORKER}")  # the written gauge
    # Tables of later migrations get the same (and must bring their own policies: a test
    # fails for a table that has none).
    op.execute(
        "ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE "
        f"ON TABLES TO {APP}, {DEFINER}"
    )
    op.execute(
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO {APP}, "
        f"{DEFINER}"
    )
    op.execute("GRANT SELECT ON alembic_version TO " + APP)  # /ready reads the revision
    for signature in _DEFINERS:
        op.execute(f"ALTER FUNCTION {signature} OWNER TO {DEFINER}")
        op.execute(f"REVOKE ALL ON FUNCTION {signature} FROM PUBLIC")
        op.execute(f"GRANT EXECUTE ON FUNCTION {signature} TO {APP}, {WORKER}")


def _protect(table: str) -> None:
    everything = "USING (true) WITH CHECK (true)"
    op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
    op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
    for command, using, check in _POLICIES[table]:
        name = f"{table}_{command.lower()}"
        clauses = (f" USING ({using})" if using else "") + (
            f" WITH CHECK ({check})" if check else ""
        )
        op.execute(f"CREATE POLICY {name} ON {table} FOR {command} TO {APP}{clauses}")
    op.execute(
        f"CREATE POLICY {table}_definer ON {table} TO {DEFINER} USING (true) WITH CHECK (true)"
    )
    if table in _WORKER_TABLES:
        op.execute(f"CREATE POLICY {table}_worker ON {table} TO {WORKER} {everything}")


def downgrade() -> None:
    for table in _USER_TABLES:
        op.execute(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
        for command, _, _ in _POLICIES[table]:
            op.execute(f"DROP POLICY {table}_{command.lower()} ON {table}")
        op.execute(f"DROP POLICY {table}_definer ON {table}")
        if table in _WORKER_TABLES:
            op.execute(f"DROP POLICY {table}_worker ON {table}")
    op.execute(
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE ALL ON TABLES FROM {APP}, {DEFINER}"
    )
    op.execute(
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE ALL ON SEQUENCES FROM {APP}, {DEFINER}"
    )
    op.execute("DROP TRIGGER list_members_allot_numbers ON list_members")
    op.execute("DROP TRIGGER tasks_allot_numbers ON tasks")
    op.execute("ALTER TABLE tasks DISABLE TRIGGER USER")
    # Back to one owner per task: each task to its list's owner, under that owner's number.
    op.add_column("tasks", sa.Column("number", sa.Integer(), nullable=True))
    op.execute(
        "UPDATE tasks t SET created_by = l.owner_id, number = n.number"
        " FROM lists l, task_numbers n"
        " WHERE l.id = t.list_id AND n.task_id = t.id AND n.user_id = l.owner_id"
    )
    op.execute("DELETE FROM tasks WHERE number IS NULL")
    for index in ("ix_tasks_assignee", "ix_tasks_created_by", "ix_tasks_list_trash",
                  "ix_tasks_list_parent", "ix_tasks_list_status_due"):  # fmt: skip
        op.drop_index(index, table_name="tasks")
    op.drop_constraint("fk_tasks_parent", "tasks", type_="foreignkey")
    op.drop_constraint("uq_tasks_list_id", "tasks", type_="unique")
    op.drop_constraint("fk_tasks_created_by", "tasks", type_="foreignkey")
    op.alter_column("tasks", "created_by", new_column_name="user_id", nullable=False)
    op.alter_column("tasks", "number", nullable=False)
    op.create_foreign_key(
        "tasks_user_id_fkey", "tasks", "users", ["user_id"], ["id"], ondelete="CASCADE"
    )
    op.create_unique_constraint("uq_tasks_user_id", "tasks", ["user_id", "id"])
    op.create_foreign_key(
        "fk_tasks_parent",
        "tasks",
        "tasks",
        ["user_id", "parent_id"],
        ["user_id", "id"],
        ondelete="CASCADE",
    )
    op.create_index("uq_tasks_user_number", "tasks", ["user_id", "number"], unique=True)
    op.create_index("ix_tasks_user_status_due", "tasks", ["user_id", "completed", "due_at"])
    op.create_index("ix_tasks_user_parent", "tasks", ["user_id", "parent_id"])
    op.create_index(
        "ix_tasks_user_trash",
        "tasks",
        ["user_id", "deleted_at"],
        postgresql_where=sa.text("deleted_at IS NOT NULL"),
    )
    op.drop_table("task_numbers")
    op.drop_constraint("fk_tasks_list", "tasks", type_="foreignkey")
    op.drop_column("tasks", "list_id")
    op.drop_column("tasks", "assignee_id")
    for signature in (
        "todo_finish_turn(text, uuid, uuid, uuid, text, boolean, integer, integer, integer, "
        "integer)",
        "todo_open_turn(text, uuid, boolean, text, uuid, float8, float8, float8, text, uuid, "
        "text, text, boolean, integer)",
        "todo_history(uuid, integer)", "todo_list_event(uuid, text, text, jsonb)",
        "todo_write_event(text, text, uuid, jsonb)", "list_members_allot_numbers()",
        "tasks_allot_numbers()", "todo_calendar_owner(text)", "todo_approval_owner(text)",
        "todo_accept_invitation(text)", "todo_list_members(uuid)", "todo_inbox()",
        "todo_owned_lists()", "task_event_json(tasks, integer)",
    ):  # fmt: skip
        op.execute(f"DROP FUNCTION {signature} CASCADE")
    op.drop_table("list_invitations")
    op.drop_table("list_members")
    op.drop_table("lists")
    op.execute("DROP FUNCTION todo_my_lists(text)")
    op.execute("DROP FUNCTION todo_acting_user()")
    _restore_0006_functions()
    op.execute("ALTER TABLE tasks ENABLE TRIGGER USER")
    op.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {APP}, {WORKER}, {DEFINER}")
    op.execute(f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {APP}, {DEFINER}")
    op.execute(f"REVOKE ALL ON SCHEMA public FROM {APP}, {WORKER}, {DEFINER}")


def _restore_0006_functions() -> None:
    """0006's functions, as that migration wrote them."""
    from importlib import import_module

    trash = import_module("backend.alembic.versions.0006_trash_undo_approvals")
    steps = import_module("backend.alembic.versions.0002_steps_settings_cached_tokens")
    op.execute(trash._TASK_JSON)
    op.execute(trash._WRITE_EVENT)
    op.execute(trash._TASK_STATE.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"))
    op.execute(steps._ONE_LEVEL.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"))
