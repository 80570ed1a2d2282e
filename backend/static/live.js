// The event stream: other tabs', the API's and other people's changes, as they happen.
import { ApiError } from "./api.js";
import { onDocumentEvent } from "./documents.js";
import { onListEvent, refreshLists } from "./lists.js";
import { onMemoryEvent } from "./memories.js";
import { showReminder } from "./notifications.js";
import { showError, state } from "./page.js";
import { refreshTasks } from "./tasks.js";

let refreshTimer = null;
/** Many events in a burst (a plan and its steps) draw the lists and the tasks once. */
function refreshSoon() {
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(() => {
    refreshLists(); // pending counts, roles, members
    refreshTasks({ live: true });
  }, 150);
}

function onLiveEvent(type, event) {
  if (type === "reminder.due") showReminder(event.data);
  if (type.startsWith("list.")) onListEvent(type, event.data);
  if (type.startsWith("document.")) onDocumentEvent(type, event.data);
  if (type.startsWith("memory.")) onMemoryEvent();
  if (type.startsWith("task.") || type.startsWith("list.") || type === "reminder.due") refreshSoon();
}

const pause = (ms, signal) =>
  new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => (clearTimeout(timer), resolve()), { once: true });
  });

// Pauses before reconnecting: doubling, with jitter so many tabs do not return at once, up
// to a few seconds (EventSource itself retries every ~3 s): the list is never stale long.
const RECONNECT_FIRST_MS = 500;
const RECONNECT_MAX_MS = 5000;

/**
 * Follow the event stream while signed in; after a drop, reconnect with growing pauses
 * and Last-Event-ID, so what happened meanwhile is replayed, none lost.
 */
export async function follow() {
  stopFollowing();
  const api = state.api;
  const live = { controller: new AbortController(), lastEventId: null };
  state.live = live;
  const { signal } = live.controller;
  let delay = RECONNECT_FIRST_MS;
  while (!signal.aborted) {
    try {
      await api.events(
        {
          lastEventId: live.lastEventId,
          signal,
          onOpen: () => {
            delay = RECONNECT_FIRST_MS;
            refreshSoon(); // whatever changed before the stream was open
          },
        },
        (type, event, id) => {
          if (id) live.lastEventId = id;
          onLiveEvent(type, event);
        },
      );
    } catch (error) {
      if (signal.aborted) return;
      if (error instanceof ApiError && error.status === 401) {
        showError(error); // signs out
        return;
      }
      if (error instanceof ApiError && error.status === 422) live.lastEventId = null; // start afresh
    }
    await pause(delay * (0.8 + Math.random() * 0.4), signal);
    delay = Math.min(delay * 2, RECONNECT_MAX_MS);
  }
}

export function stopFollowing() {
  state.live?.controller.abort();
  state.live = null;
}
