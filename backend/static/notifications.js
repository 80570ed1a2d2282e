// Reminders on this page and as the browser's notifications.
import { $, notice } from "./page.js";

export function showReminder(data) {
  const task = data.task;
  notice(`⏰ Reminder: ${task.title}${data.late ? " (while you were away)" : ""}`, { kind: "reminder", lingerMs: 0 });
  if (!("Notification" in window) || Notification.permission !== "granted") return;
  try {
    // The tag makes a second tab's copy of the same reminder replace this one.
    new Notification("Reminder", { body: task.title, tag: `reminder-${task.id}` });
  } catch {
    // Some browsers only notify from a service worker: the notice on the page remains.
  }
}

export function showNotificationState() {
  const button = $("#enable-notifications");
  const text = $("#notifications-state");
  const supported = "Notification" in window;
  const permission = supported ? Notification.permission : "unsupported";
  button.hidden = permission !== "default";
  text.textContent = {
    unsupported: "Reminders show on this page while it is open; this browser has no notifications.",
    granted: "Reminders show on this page and as browser notifications.",
    denied: "Reminders show on this page; notifications are blocked for this site in the browser's settings.",
    default: "Reminders show on this page while it is open; the browser can notify you too.",
  }[permission];
}

async function enableNotifications() {
  // Asked only here, on a click: never on load.
  await Notification.requestPermission();
  showNotificationState();
  if ($("#enable-notifications").hidden) $("#notifications-state").focus(); // the button went
}

export function startNotifications() {
  $("#enable-notifications").addEventListener("click", enableNotifications);
}
