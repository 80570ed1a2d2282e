// A small client of todo-agent's public API: what any frontend would call.

/** An HTTP answer that is not a success, with what the person needs to know. */
export class ApiError extends Error {
  constructor(status, detail, retryAfter) {
    super(typeof detail === "string" ? detail : `HTTP ${status}`);
    this.status = status; // 0: the service could not be reached
    this.detail = detail;
    this.retryAfter = retryAfter; // seconds, from Retry-After (429, 503)
  }
}

async function failure(response) {
  let detail = null;
  try {
    detail = (await response.json()).detail;
  } catch {
    // not JSON: a proxy's error page, for instance
  }
  const retry = Number.parseInt(response.headers.get("Retry-After") ?? "", 10);
  return new ApiError(response.status, detail, Number.isFinite(retry) ? retry : null);
}

async function send(url, init) {
  let response;
  try {
    response = await fetch(url, init);
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError(0, null, null);
  }
  if (!response.ok) throw await failure(response);
  return response;
}

/** The user id a token names (its `sub`); the server verifies it, this only reads it. */
export function tokenSubject(token) {
  const payload = token.split(".")[1];
  if (!payload) throw new Error("not a JWT");
  const json = atob(payload.replace(/-/g, "+").replace(/_/g, "/"));
  const bytes = Uint8Array.from(json, (c) => c.charCodeAt(0));
  const claims = JSON.parse(new TextDecoder().decode(bytes));
  if (typeof claims.sub !== "string" || !claims.sub) throw new Error("the token has no sub");
  return { userId: claims.sub, name: claims.name ?? claims.sub };
}

/** Development sign-in: a token for a name (404 where the server does not offer it). */
export async function devToken(name, base = "") {
  const response = await send(`${base}/dev/token`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ name }),
  });
  return response.json();
}

/** The service's VAPID public key for Web Push, `{public_key}` (404: it sends no push). */
export async function pushKey(base = "") {
  const response = await send(`${base}/push/key`);
  return response.json();
}

/** Server-sent events from a fetch response: calls onEvent(name, data, id) for each. */
async function readEvents(response, onEvent) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message";
      let id = null;
      const data = [];
      for (const line of frame.split("\n")) {
        if (line.startsWith(":")) continue; // keep-alive comment
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("id:")) id = line.slice(3).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) onEvent(event, JSON.parse(data.join("\n")), id);
    }
  }
}

export class Api {
  constructor({ token, userId, base = "" }) {
    this.token = token;
    this.root = `${base}/api/${encodeURIComponent(userId)}`;
  }

  request(path, { method = "GET", body, signal } = {}) {
    const headers = { Authorization: `Bearer ${this.token}` };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    return send(`${this.root}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
    });
  }

  async json(path, options) {
    const response = await this.request(path, options);
    return response.status === 204 ? null : response.json();
  }

  /**
   * One chat turn, streamed. Resolves with the `done` answer; rejects with ApiError
   * (before the message was accepted, `accepted` is false: nothing was stored).
   * `approvals` ([{id, approved, reason?}]) answers the session's held tool calls; then
   * `message` may be left out and the answer is the turn's continuation.
   */
  async chat({ message, sessionId, timezone, approvals }, onEvent, signal) {
    const body = { session_id: sessionId ?? null, timezone };
    if (message !== undefined) body.message = message;
    if (approvals) body.approvals = approvals;
    const response = await this.request("/chat/stream", { method: "POST", body, signal });
    let answer = null;
    let failed = null;
    try {
      await readEvents(response, (event, data) => {
        if (event === "done") answer = data;
        else if (event === "error") failed = new ApiError(500, data.detail, null);
        else onEvent(event, data);
      });
    } catch (error) {
      if (error.name === "AbortError") throw error;
      failed = new ApiError(0, null, null);
    }
    if (failed) {
      failed.accepted = true;
      throw failed;
    }
    if (!answer) throw Object.assign(new ApiError(0, null, null), { accepted: true });
    return answer;
  }

  /**
   * Follow the user's events (task changes, reminders) until the stream ends or `signal`
   * aborts. EventSource cannot send the bearer token, hence fetch and a stream reader.
   * `lastEventId` resumes after that event: the service replays what was missed.
   * Calls onOpen() once connected and onEvent(type, cloudEvent, id) for each event.
   */
  async events({ lastEventId, signal, onOpen }, onEvent) {
    const headers = { Authorization: `Bearer ${this.token}`, Accept: "text/event-stream" };
    if (lastEventId) headers["Last-Event-ID"] = lastEventId;
    const response = await send(`${this.root}/events`, { headers, signal, cache: "no-store" });
    onOpen?.();
    await readEvents(response, onEvent);
  }

  /** The top-level tasks, of one list when `listId` is given. */
  tasks(status = "all", listId = null) {
    const list = listId ? `&list=${encodeURIComponent(listId)}` : "";
    return this.json(`/tasks?status=${encodeURIComponent(status)}&top_level=true&limit=100${list}`);
  }
  /** A new task: `{title, list_id?}` (no list: the Inbox). */
  addTask(task) {
    return this.json("/tasks", { method: "POST", body: task });
  }
  /** One task, with its steps in order. */
  task(id) {
    return this.json(`/tasks/${id}`);
  }
  addStep(parentId, title) {
    return this.json("/tasks", { method: "POST", body: { title, parent_id: parentId } });
  }
  /** Change the fields given; `null` clears one (recurrence: null stops the series). */
  updateTask(id, changes) {
    return this.json(`/tasks/${id}`, { method: "PATCH", body: changes });
  }
  /** Answers the task, and `next` when it was an occurrence of a repeating task. */
  completeTask(id, completed) {
    return this.json(`/tasks/${id}/complete`, { method: "PATCH", body: { completed } });
  }
  /** To the trash: it can be restored until it is purged. */
  deleteTask(id) {
    return this.json(`/tasks/${id}`, { method: "DELETE" });
  }

  /** The trash, most recently deleted first: {data: [task + deleted_at], next_cursor}. */
  trash(cursor) {
    const page = cursor ? `&cursor=${encodeURIComponent(cursor)}` : "";
    return this.json(`/trash?limit=100${page}`);
  }
  restoreTask(id) {
    return this.json(`/tasks/${id}/restore`, { method: "POST" });
  }
  /** Deleted for good (a task in the trash only). */
  purgeTask(id) {
    return this.json(`/trash/${id}`, { method: "DELETE" });
  }
  emptyTrash() {
    return this.json("/trash", { method: "DELETE" });
  }

  /** The user's lists (the Inbox first) and those shared with them, with their role. */
  lists() {
    return this.json("/lists");
  }
  createList(name) {
    return this.json("/lists", { method: "POST", body: { name } });
  }
  renameList(listId, name) {
    return this.json(`/lists/${listId}`, { method: "PATCH", body: { name } });
  }
  /** Its tasks go to the owner's trash; every member loses it. */
  deleteList(listId) {
    return this.json(`/lists/${listId}`, { method: "DELETE" });
  }
  /** Who shares a list, the owner first: {data: [{user_id, display_name, role, joined_at}]}. */
  members(listId) {
    return this.json(`/lists/${listId}/members`);
  }
  changeRole(listId, userId, role) {
    return this.json(`/lists/${listId}/members/${encodeURIComponent(userId)}`, { method: "PATCH", body: { role } });
  }
  /** The owner removes a member; a member removing themself leaves. */
  removeMember(listId, userId) {
    return this.json(`/lists/${listId}/members/${encodeURIComponent(userId)}`, { method: "DELETE" });
  }
  /** A single-use invitation with a role: {token, role, expires_at}; the token is shown once. */
  invite(listId, role) {
    return this.json(`/lists/${listId}/invitations`, { method: "POST", body: { role } });
  }
  revokeInvitation(listId, token) {
    return this.json(`/lists/${listId}/invitations/${encodeURIComponent(token)}`, { method: "DELETE" });
  }
  /** Join the list an invitation is for: answers the list (404 used or expired, 409 your own). */
  acceptInvitation(token) {
    return this.json(`/invitations/${encodeURIComponent(token)}/accept`, { method: "POST" });
  }

  /** The documents the user reads, newest first: {data: [...]} (of one list when given). */
  documents(listId = null) {
    return this.json(listId ? `/documents?list_id=${encodeURIComponent(listId)}` : "/documents");
  }
  /** One document with its `text` (Markdown or plain text). */
  document(id) {
    return this.json(`/documents/${id}`);
  }
  /** A file (a File or Blob) as a new document of `listId` (null: the Inbox). */
  async uploadDocument(file, listId = null) {
    const form = new FormData();
    form.append("file", file, file.name);
    if (listId) form.append("list_id", listId);
    const response = await send(`${this.root}/documents`, {
      method: "POST",
      headers: { Authorization: `Bearer ${this.token}` }, // the browser sets the multipart type
      body: form,
    });
    return response.json();
  }
  deleteDocument(id) {
    return this.json(`/documents/${id}`, { method: "DELETE" });
  }

  settings() {
    return this.json("/settings");
  }
  updateSettings(changes) {
    return this.json("/settings", { method: "PATCH", body: changes });
  }

  /** Everything the service holds about the user: the `todo-agent-export/1` document, as a Blob. */
  async exportAccount() {
    return (await this.request("/export")).blob();
  }
  /** Erase the user and all that is theirs (204); a new token for them starts an empty account. */
  deleteAccount() {
    return this.json("", { method: "DELETE" });
  }

  /** A secret calendar (iCalendar) feed URL; asking again replaces the old one. */
  createCalendarFeed() {
    return this.json("/calendar", { method: "POST" });
  }
  revokeCalendarFeed() {
    return this.json("/calendar", { method: "DELETE" });
  }

  /** Where reminders go: {email, ntfy, push, reminders, digest, quiet_hours}. */
  notifications() {
    return this.json("/notifications");
  }
  /** Change part of it (`{email: {address}}` mails a code to confirm the address). */
  updateNotifications(changes) {
    return this.json("/notifications", { method: "PATCH", body: changes });
  }
  /** The code the service mailed: the address is used once it is verified. */
  verifyEmail(code) {
    return this.json("/notifications/email/verify", { method: "POST", body: { code } });
  }
  /** A test notification to every channel the person set. */
  testNotification() {
    return this.json("/notifications/test", { method: "POST" });
  }
  /** This browser's PushSubscription (its JSON): the same endpoint again is the same one. */
  addPushSubscription(subscription) {
    return this.json("/push/subscriptions", { method: "POST", body: subscription });
  }
  pushSubscriptions() {
    return this.json("/push/subscriptions");
  }
  deletePushSubscription(id) {
    return this.json(`/push/subscriptions/${encodeURIComponent(id)}`, { method: "DELETE" });
  }

  /** Passwords for CalDAV apps: {data: [{id, name, username, read_only, created_at, last_used_at}]}. */
  appPasswords() {
    return this.json("/app-passwords");
  }
  /** A new one: the answer holds its `password`, shown this once. */
  createAppPassword({ name, readOnly }) {
    return this.json("/app-passwords", { method: "POST", body: { name, read_only: readOnly } });
  }
  revokeAppPassword(id) {
    return this.json(`/app-passwords/${encodeURIComponent(id)}`, { method: "DELETE" });
  }

  /** What the assistant remembers about the person, newest first: {data: [...]}. */
  memories() {
    return this.json("/memories");
  }
  addMemory(text) {
    return this.json("/memories", { method: "POST", body: { text } });
  }
  updateMemory(id, text) {
    return this.json(`/memories/${encodeURIComponent(id)}`, { method: "PATCH", body: { text } });
  }
  deleteMemory(id) {
    return this.json(`/memories/${encodeURIComponent(id)}`, { method: "DELETE" });
  }
  /** Every memory, at once. */
  forgetMemories() {
    return this.json("/memories", { method: "DELETE" });
  }

  sessions(cursor) {
    const page = cursor ? `&cursor=${encodeURIComponent(cursor)}` : "";
    return this.json(`/sessions?limit=20${page}`);
  }
  messages(sessionId) {
    return this.json(`/sessions/${sessionId}/messages?limit=200`);
  }
  renameSession(sessionId, title) {
    return this.json(`/sessions/${sessionId}`, { method: "PATCH", body: { title } });
  }
  /** Take back the session's latest turn that changed tasks: {message_id, changes, summary}. */
  undo(sessionId) {
    return this.json(`/sessions/${sessionId}/undo`, { method: "POST" });
  }
  deleteSession(sessionId) {
    return this.json(`/sessions/${sessionId}`, { method: "DELETE" });
  }
}
