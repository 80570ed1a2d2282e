// The page's service worker, served from the root (/sw.js) so that its scope is the whole
// page. It shows what the service pushes (a reminder with Done and Snooze, the daily plan)
// while no page is open, acts on a button without opening one, and opens the page at the
// task on a click. It caches nothing: the page is the service's, and always fresh.

const ACTIONS_URL = "/notifications/actions";
const ICON = "/static/icons/icon-192.png";

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));

/** The push's JSON payload, or null (a browser must show something for every push). */
function payloadOf(event) {
  try {
    return event.data ? event.data.json() : null;
  } catch {
    return null;
  }
}

/** Only a page of this origin is ever opened from a notification. */
function pageUrl(url) {
  try {
    const target = new URL(url ?? "/", self.location.origin);
    return target.origin === self.location.origin ? target.href : new URL("/", self.location.origin).href;
  } catch {
    return new URL("/", self.location.origin).href;
  }
}

/**
 * How one push reads as a notification. A reminder's tag is the one the open page uses for
 * the same reminder (`reminder-<task id>`), so the two never show twice; the daily plan has a
 * tag of its own, so a late one replaces an earlier one.
 */
function notificationOf(payload) {
  const type = typeof payload?.type === "string" ? payload.type : "";
  const task = payload?.task ?? null;
  const actions = Array.isArray(payload?.actions) ? payload.actions.filter((a) => a?.action && a?.token) : [];
  const options = {
    body: typeof payload?.body === "string" ? payload.body : (task?.title ?? ""),
    icon: ICON,
    badge: ICON,
    data: {
      url: pageUrl(payload?.url),
      title: payload?.title ?? "todo-agent",
      // Each button's token: the authority for that one action, never the page's sign-in.
      tokens: Object.fromEntries(actions.map((a) => [a.action, a.token])),
    },
    actions: actions.map((a) => ({ action: a.action, title: String(a.title ?? a.action) })),
  };
  if (type === "digest" || type.startsWith("digest.")) {
    options.tag = "digest";
    options.renotify = true;
  } else if (task?.id) {
    options.tag = `reminder-${task.id}`;
    options.renotify = true; // a snoozed reminder rings again
  }
  return [payload?.title || (task ? "Reminder" : "todo-agent"), options];
}

self.addEventListener("push", (event) => {
  const payload = payloadOf(event);
  const [title, options] = payload ? notificationOf(payload) : ["todo-agent", { body: "Something new.", icon: ICON }];
  event.waitUntil(self.registration.showNotification(title, options));
});

/** Done or Snooze: the notification's token goes to the service, with no sign-in. */
async function act(action, token, data) {
  let response = null;
  try {
    response = await fetch(ACTIONS_URL, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ token }),
      credentials: "omit",
    });
  } catch {
    // offline: said below
  }
  if (response?.ok) return;
  const why = response && [401, 410].includes(response.status) ? "this notification has expired" : "the service could not be reached";
  await self.registration.showNotification(data.title, {
    body: `${action === "done" ? "Not marked done" : "Not snoozed"}: ${why}. Open the page to do it there.`,
    icon: ICON,
    data: { url: data.url, tokens: {} },
  });
}

/** Focus a page of ours already open (and show it the task), else open one at the task. */
async function openPage(url) {
  const windows = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
  const page = windows.find((client) => new URL(client.url).origin === self.location.origin);
  if (!page) return self.clients.openWindow(url);
  page.postMessage({ type: "open", url });
  return page.focus();
}

self.addEventListener("notificationclick", (event) => {
  const { notification, action } = event;
  const data = notification.data ?? { url: pageUrl("/"), tokens: {} };
  notification.close();
  const token = action ? data.tokens?.[action] : null;
  event.waitUntil(token ? act(action, token, data) : openPage(data.url));
});
