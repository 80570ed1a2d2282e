// Reminders on this page, as the browser's notifications, and (Web Push through the service
// worker, /sw.js) on this browser while the page is closed.
import { ApiError, pushKey } from "./api.js";
import { $, inputProblem, itemsOf, notice, state } from "./page.js";
import { settingsAction, settingsStatus } from "./settings.js";

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
  if (!(await push.registration)) return "The page's service worker could not start, so push cannot reach this browser.";
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
    countPush(await state.api.addPushSubscription(subscription.toJSON()), true);
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
  const mine = itemsOf(await state.api.pushSubscriptions()).find((s) => s.endpoint === subscription.endpoint);
  if (mine) await state.api.deletePushSubscription(mine.id);
  await subscription.unsubscribe();
  if (mine) countPush(mine, false);
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
    default: "Reminders show on this page while it is open; the browser can notify you too.",
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
 * same subscription to the service); one made for another key of the service's is made
 * afresh. What went wrong shows in the Settings.
 */
export async function resendSubscription() {
  if (!("Notification" in window) || Notification.permission !== "granted") return;
  if (!(await currentSubscription()) || !state.api) return;
  push.problem = await subscribe();
}

// ---------------------------------------------------------------- Settings: where reminders go

const CHANNELS = ["push", "email", "ntfy"];
export const NOTIFY_LABELS = {
  email: "Email",
  address: "Email",
  code: "Code",
  ntfy: "ntfy URL",
  url: "ntfy URL",
  reminders: "Send reminders to",
  digest: "Daily plan",
  at: "Daily plan",
  channels: "Daily plan",
  quiet_hours: "Quiet hours",
  start: "Quiet hours",
  end: "Quiet hours",
};

let shown = null; // the notification settings as the service last answered them

/** The channels ticked in one of the part's groups of checkboxes. */
const ticked = (name) => [...document.querySelectorAll(`#notify-channels input[name="${name}"]:checked`)].map((box) => box.value);

function tick(name, channels) {
  for (const box of document.querySelectorAll(`#notify-channels input[name="${name}"]`)) box.checked = channels.includes(box.value);
}

/** The person's notification settings; the part stays hidden where the service has none. */
export async function loadNotificationSettings() {
  try {
    shown = await state.api.notifications();
  } catch (error) {
    shown = null;
    $("#notify-channels").hidden = true; // a service without them (404), or not now
    if (error instanceof ApiError && error.status === 401) throw error;
    return;
  }
  $("#notify-channels").hidden = false;
  drawNotificationSettings();
}

function drawNotificationSettings() {
  const email = shown.email;
  $("#notify-email").value = email?.address ?? "";
  $("#notify-email-remove").hidden = !email;
  $("#notify-email-state").textContent = !email
    ? "No address: reminders are not mailed."
    : email.verified
      ? `Verified: reminders can be mailed to ${email.address}.`
      : `Not verified yet: type the code mailed to ${email.address}, or send a new one.`;
  $("#notify-verify").hidden = !email || email.verified;
  $("#notify-ntfy").value = shown.ntfy?.url ?? "";
  tick("reminders", shown.reminders ?? []);
  $("#notify-digest-at").value = shown.digest?.at ?? "";
  tick("digest", shown.digest?.channels ?? []);
  const quiet = shown.quiet_hours;
  $("#notify-quiet").checked = Boolean(quiet);
  $("#notify-quiet-start").value = quiet?.start ?? "22:00";
  $("#notify-quiet-end").value = quiet?.end ?? "07:00";
  showQuietHours();
  drawPushCount();
}

function drawPushCount() {
  const browsers = (shown?.push ?? []).length;
  $("#notify-push-count").textContent =
    browsers === 1 ? "1 browser gets push notifications." : `${browsers} browsers get push notifications.`;
}

/** This browser's subscription added or removed: the count follows, the rest stays as typed. */
function countPush(subscription, added) {
  if (!shown) return;
  const others = (shown.push ?? []).filter((s) => s.id !== subscription.id);
  shown.push = added ? [...others, subscription] : others;
  drawPushCount();
}

function showQuietHours() {
  $("#notify-quiet-times").hidden = !$("#notify-quiet").checked;
}

/** What the person changed in the part (the address has buttons of its own): `{}` for nothing. */
function notificationChanges() {
  if (!shown) return {};
  const changes = {};
  const ntfy = $("#notify-ntfy").value.trim();
  if (ntfy !== (shown.ntfy?.url ?? "")) changes.ntfy = ntfy ? { url: ntfy } : null;
  const reminders = ticked("reminders");
  if (reminders.join() !== CHANNELS.filter((c) => (shown.reminders ?? []).includes(c)).join()) changes.reminders = reminders;
  const digest = { at: $("#notify-digest-at").value || null, channels: ticked("digest") };
  const before = shown.digest ?? { at: null, channels: [] };
  if (digest.at !== (before.at ?? null) || digest.channels.join() !== CHANNELS.filter((c) => (before.channels ?? []).includes(c)).join()) {
    changes.digest = digest;
  }
  const quiet = $("#notify-quiet").checked ? { start: $("#notify-quiet-start").value, end: $("#notify-quiet-end").value } : null;
  if (JSON.stringify(quiet) !== JSON.stringify(shown.quiet_hours ? { start: shown.quiet_hours.start, end: shown.quiet_hours.end } : null)) {
    changes.quiet_hours = quiet;
  }
  return changes;
}

/**
 * Part of the Settings' Save: what changed here goes to the service. Rejects when it is
 * refused (a private address as the ntfy URL, ...): NOTIFY_LABELS name its fields.
 */
export async function saveNotificationSettings() {
  const changes = notificationChanges();
  if (!Object.keys(changes).length) return;
  shown = await state.api.updateNotifications(changes);
  drawNotificationSettings();
}

async function sendEmailCode() {
  const address = $("#notify-email").value.trim();
  if (!address) {
    $("#notify-email").focus();
    return;
  }
  await settingsAction(async () => {
    shown = await state.api.updateNotifications({ email: { address } });
    drawNotificationSettings();
    if (shown.email?.verified) {
      settingsStatus(`Verified: reminders can be mailed to ${address}.`);
      return;
    }
    settingsStatus(`A code is on its way to ${address}: type it here.`);
    $("#notify-code").value = "";
    $("#notify-code").focus();
  }, NOTIFY_LABELS);
}

async function verifyEmail() {
  const code = $("#notify-code").value.trim();
  if (!code) {
    $("#notify-code").focus();
    return;
  }
  await settingsAction(async () => {
    await state.api.verifyEmail(code);
    await loadNotificationSettings();
    settingsStatus(`Verified: reminders can be mailed to ${shown?.email?.address ?? "your address"}.`);
    $("#notify-email-state").focus();
  }, NOTIFY_LABELS);
}

async function removeEmail() {
  await settingsAction(async () => {
    shown = await state.api.updateNotifications({ email: null });
    drawNotificationSettings();
    settingsStatus("Address removed: reminders are not mailed.");
    $("#notify-email").focus();
  });
}

async function sendTest() {
  await settingsAction(async () => {
    await saveNotificationSettings(); // what is on the screen is what gets the test
    await state.api.testNotification();
    settingsStatus("A test notification is on its way to each of your channels.");
  }, NOTIFY_LABELS);
}

/** Enter in one of the part's boxes does its own button, not the settings' Save. */
function enterClicks(box, button) {
  box.addEventListener("keydown", (event) => {
    if (event.key !== "Enter") return;
    event.preventDefault();
    button.click();
  });
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
  $("#notify-quiet").addEventListener("change", showQuietHours);
  $("#notify-email-send").addEventListener("click", sendEmailCode);
  $("#notify-email-remove").addEventListener("click", removeEmail);
  $("#notify-verify-button").addEventListener("click", verifyEmail);
  $("#notify-test").addEventListener("click", sendTest);
  enterClicks($("#notify-email"), $("#notify-email-send"));
  enterClicks($("#notify-code"), $("#notify-verify-button"));
  if (!("serviceWorker" in navigator)) return;
  push.registration = navigator.serviceWorker.register(WORKER).catch(() => null);
  navigator.serviceWorker.addEventListener("message", onWorkerMessage);
}
