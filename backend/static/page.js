// What every part of the page shares: its state, building elements, errors, notices and the
// panels on a phone. Everything shown that came from a person or the model is set with
// textContent, never parsed as HTML.
import { ApiError } from "./api.js";
import { signOut } from "./signin.js";

export const $ = (selector) => document.querySelector(selector);

export const state = {
  api: null,
  user: null, // {userId, name}
  owner: null, // whose conversation the page shows
  sessionId: null,
  sessionsCursor: null,
  busy: false,
  retryTimer: null,
  expanded: new Set(), // ids of tasks whose steps are shown
  refocus: null, // a selector in the task list to focus once it is drawn again
  draft: null, // {key, value}: what was typed in a box of the task list, kept across a redraw
  live: null, // the event stream: {controller, lastEventId}
  editing: null, // the task in the editor
  lists: [], // the user's lists, the Inbox first, each with the user's role
  listsReady: null, // a promise: the lists are known (the task list's controls follow the role)
  listId: null, // the list the task list shows; null: all tasks
  members: new Map(), // list id -> its members, for assignees' names (shared lists)
  sharing: null, // the list whose share dialog is open
  invitation: null, // the invite link made in the share dialog: {listId, token}
  leaving: null, // the list the user is leaving: no "you were removed" notice for it
  viewing: null, // the document open in the viewer
};

/** The items of a listing: `{data: [...]}` as most of the API answers, or a bare array. */
export const itemsOf = (listing) => (Array.isArray(listing) ? listing : (listing?.data ?? []));

export function el(tag, { className, text, attrs } = {}, children = []) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  for (const [name, value] of Object.entries(attrs ?? {})) node.setAttribute(name, value);
  node.append(...children);
  return node;
}

export const timezone = () => Intl.DateTimeFormat().resolvedOptions().timeZone;
export const dateTime = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });
export const dateOnly = new Intl.DateTimeFormat(undefined, { dateStyle: "medium" });
// ---------------------------------------------------------------- errors

export function describe(error) {
  if (!(error instanceof ApiError)) return `Something went wrong: ${error.message}`;
  const detail = typeof error.detail === "string" ? error.detail : null;
  switch (error.status) {
    case 0:
      return "Cannot reach the service. Check your connection, then try again.";
    case 401:
      return "Your sign-in has expired or is not valid. Please sign in again.";
    case 403: // a viewer's write says which list and role; a foreign path says so too
      return detail ?? "This token belongs to another user.";
    case 404:
      return `${detail ?? "Not found."} It may have been deleted elsewhere.`;
    case 409: // the service says which conflict: a busy chat, nothing to undo, ...
      return detail ?? "This chat is still busy with another message. Wait for it to answer, then send again.";
    case 413:
      return "That message is too large.";
    case 422:
      return detail ?? "The service could not accept that input.";
    case 429:
      return "You are sending messages too quickly.";
    case 503:
      return "The service is temporarily unavailable.";
    default:
      return detail ?? `The service answered with an error (${error.status}).`;
  }
}

export function showError(error) {
  clearInterval(state.retryTimer);
  const box = $("#error");
  const message = describe(error);
  box.hidden = false;
  if (error instanceof ApiError && error.status === 401) {
    box.textContent = message;
    signOut(message);
    return;
  }
  let wait = error instanceof ApiError ? error.retryAfter : null;
  if (!wait) {
    box.textContent = message;
    return;
  }
  const tick = () => {
    box.textContent = wait > 0 ? `${message} Try again in ${wait} s.` : `${message} You can try again now.`;
    if (wait-- <= 0) clearInterval(state.retryTimer);
  };
  tick();
  state.retryTimer = setInterval(tick, 1000);
}

export function clearError() {
  clearInterval(state.retryTimer);
  $("#error").hidden = true;
  $("#error").textContent = "";
}

/**
 * A 422's detail in plain words: a sentence as it is, pydantic's list of problems as the
 * first problem per field (`labels` names the fields).
 */
export function inputProblem(error, labels, fallback) {
  if (!(error instanceof ApiError) || error.status !== 422 || !Array.isArray(error.detail)) return describe(error);
  const byField = new Map();
  for (const problem of error.detail) {
    const field = (problem.loc ?? []).find((part) => part in labels);
    const label = field ? labels[field] : fallback;
    // "Value error, ..." is how pydantic prefixes a validator's own message.
    if (!byField.has(label)) byField.set(label, String(problem.msg).replace(/^Value error, /, ""));
  }
  return [...byField].map(([label, msg]) => `${label}: ${msg}.`).join(" ");
}

// ---------------------------------------------------------------- notices

const NOTICES_KEPT = 5;

/** A line in the live region (read out politely); reminders stay until dismissed. */
export function notice(text, { kind = "info", lingerMs = 10000 } = {}) {
  const box = $("#notices");
  const dismiss = el("button", {
    className: "icon",
    text: "✕",
    attrs: { type: "button", "aria-label": `Dismiss: ${text}`, title: "Dismiss" },
  });
  const item = el("p", { className: `notice-item ${kind}` }, [el("span", { text }), dismiss]);
  dismiss.addEventListener("click", () => item.remove());
  box.append(item);
  while (box.childElementCount > NOTICES_KEPT) box.firstElementChild.remove();
  if (lingerMs) setTimeout(() => item.remove(), lingerMs);
}
/** A link in a read-only box to the clipboard; where the browser refuses, it stays selected. */
export async function copyField(input, status, copied) {
  input.select();
  try {
    await navigator.clipboard.writeText(input.value);
    status.textContent = copied;
  } catch {
    status.textContent = "Selected: copy it with Ctrl+C (⌘C).";
  }
}
// ---------------------------------------------------------------- layout: panels as tabs on a phone

export function showView(view) {
  document.body.dataset.view = view;
  for (const button of document.querySelectorAll("[data-show]")) {
    button.setAttribute("aria-pressed", String(button.dataset.show === view));
  }
}

export function startLayout() {
  for (const button of document.querySelectorAll("[data-show]")) {
    button.addEventListener("click", () => showView(button.dataset.show));
  }
  showView("chat");
}
