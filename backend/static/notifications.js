// Reminders on this page, as the browser's notifications, and (Web Push through the service
// worker, /sw.js) on this browser while the page is closed.
import { ApiError, pushKey } from "./api.js";
import { $, notice, state } from "./page.js";

const WORKER = "/sw.js"; // from the root: its scope is the whole page

const push = {
  registration: null, // a promise: the service worker's registration, or null where there is none
  subscribed: false, // this browser gets the person's reminders while the page is closed
  problem: null, // why it does not, in a sentence
};

export function showReminder(data) {
  const task = data.task;
  notice(`⏰ Reminder: ${task.title}${data.late ? " (while you were away)" : ""}`, { kind: "reminder", lingerMs: 0 });
  if (!("Notification" in window) || Notification.permission !== "granted") return;
  try {
    // The tag makes a second tab's copy of the same reminder (or the push's) replace this one.
    new Notification("Reminder", { body: task.title, tag: `reminder-${task.id}` });
  } catch {
    // Some browsers only notify from a service worker: the notice on the page remains.
  }
}

// A browser whose push service cannot be reached may neither subscribe nor fail for minutes.
const SUBSCRIBE_WAIT_MS = 20000;

function answerWithin(ms, promise, why) {
  let timer;
  const late = new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(why)), ms)));
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

const pushSupported = () => "serviceWorker" in navigator && "PushManager" in window;

/** This browser's push subscription, if it has one (null where push is not offered). */
async function currentSubscription() {
  const registration = await push.registration;
  if (!registration?.pushManager) return null;
  try {
    return await registration.pushManager.getSubscription();
  } catch {
    return null;
  }
}

/** The VAPID key as the bytes PushManager takes (some browsers take no base64url string). */
function keyBytes(base64url) {
  const binary = atob(base64url.replace(/-/g, "+").replace(/_/g, "/"));
  return Uint8Array.from(binary, (c) => c.charCodeAt(0));
}

/**
 * Subscribe this browser to the person's reminders and tell the service. Resolves with a
 * sentence saying why not, or null.
 */
async function subscribe() {
  if (!pushSupported()) return "This browser cannot receive them while the page is closed.";
  let key;
  try {
    key = keyBytes((await pushKey()).public_key);
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) return "This service does not send push notifications.";
    return "The service's push key could not be read; try again later.";
  }
  try {
    const registration = await navigator.serviceWorker.ready;
    let subscription = await registration.pushManager.getSubscription();
    const sameKey = (s) => !s.options?.applicationServerKey || new Uint8Array(s.options.applicationServerKey).join() === key.join();
    if (subscription && !sameKey(subscription)) {
      await subscription.unsubscribe(); // the service's key changed: the old one cannot reach it
      subscription = null;
    }
    subscription ??= await answerWithin(
      SUBSCRIBE_WAIT_MS,
      registration.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: key }),
      "its push service did not answer",
    );
    await state.api.addPushSubscription(subscription.toJSON());
    return null;
  } catch (error) {
    if (error instanceof ApiError) return `The service did not take this browser's subscription: ${error.message}`;
    return `This browser could not subscribe (${error.message || error.name}).`;
  }
}

/** This browser stops getting reminders while the page is closed. */
async function unsubscribe() {
  const subscription = await currentSubscription();
  if (!subscription) return;
  const { data } = await state.api.pushSubscriptions();
  const mine = data.find((s) => s.endpoint === subscription.endpoint);
  if (mine) await state.api.deletePushSubscription(mine.id);
  await subscription.unsubscribe();
}

/** What the Settings say about notifications, and which of their buttons show. */
export async function showNotificationState() {
  push.subscribed = Boolean(await currentSubscription());
  const supported = "Notification" in window;
  const permission = supported ? Notification.permission : "unsupported";
  $("#enable-notifications").hidden = permission !== "default";
  const toggle = $("#push-toggle");
  toggle.hidden = permission !== "granted" || !pushSupported();
  toggle.textContent = push.subscribed ? "Turn off for this browser" : "Turn on for this browser";
  const granted = push.subscribed
    ? "Reminders show on this page and as browser notifications, even while the page is closed."
    : `Reminders show on this page and as browser notifications while it is open.${push.problem ? ` ${push.problem}` : ""}`;
  $("#notifications-state").textContent = {
    unsupported: "Reminders show on this page while it is open; this browser has no notifications.",
    granted,
    denied: "Reminders show on this page; notifications are blocked for this site in the browser's settings.",
    default: "Reminders show on this page while it is open; the browser can notify you too, even when it is closed.",
  }[permission];
}

async function enableNotifications() {
  // Asked only here, on a click: never on load.
  const permission = await Notification.requestPermission();
  await showNotificationState(); // on this page at once; push may take a moment more
  if ($("#enable-notifications").hidden) $("#notifications-state").focus(); // the button went
  if (permission !== "granted" || !pushSupported()) return;
  push.problem = await subscribe();
  await showNotificationState();
}

async function togglePush() {
  const button = $("#push-toggle");
  button.disabled = true;
  try {
    if (push.subscribed) {
      await unsubscribe();
      push.problem = null;
    } else {
      push.problem = await subscribe();
    }
  } catch (error) {
    push.problem = `That did not work: ${error.message}`;
  } finally {
    button.disabled = false;
  }
  await showNotificationState();
  $("#notifications-state").focus();
}

/**
 * Signed in: a browser with notifications on sends its subscription again, since a browser
 * may replace it unasked and a push service may drop it quietly (the same endpoint is the
 * same subscription to the service).
 */
export async function resendSubscription() {
  if (!("Notification" in window) || Notification.permission !== "granted") return;
  const subscription = await currentSubscription();
  if (!subscription || !state.api) return;
  try {
    await state.api.addPushSubscription(subscription.toJSON());
  } catch {
    // The page works without it; the Settings say what to do if push does not arrive.
  }
}

/** A notification clicked while a page is open: the worker asks that page to show the task. */
function onWorkerMessage(event) {
  if (event.data?.type !== "open" || typeof event.data.url !== "string") return;
  const url = new URL(event.data.url, location.origin);
  if (url.origin !== location.origin) return;
  if (url.pathname === location.pathname && url.search === location.search) location.hash = url.hash;
  else location.assign(url.href);
}

export function startNotifications() {
  $("#enable-notifications").addEventListener("click", enableNotifications);
  $("#push-toggle").addEventListener("click", togglePush);
  if (!("serviceWorker" in navigator)) return;
  push.registration = navigator.serviceWorker.register(WORKER).catch(() => null);
  navigator.serviceWorker.addEventListener("message", onWorkerMessage);
}
