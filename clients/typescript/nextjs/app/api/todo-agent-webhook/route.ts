import { Webhook } from "standardwebhooks";
import type { TodoEvent } from "../../../lib/use-task-events";

// The same secret as todo-agent's WEBHOOK_SECRET (whsec_...).
const webhook = new Webhook(process.env.TODO_AGENT_WEBHOOK_SECRET ?? "");

/** POST /api/todo-agent-webhook: todo-agent's events, verified before anything is done. */
export async function POST(request: Request): Promise<Response> {
  const payload = await request.text();
  let event: TodoEvent;
  try {
    event = webhook.verify(payload, Object.fromEntries(request.headers)) as TodoEvent;
  } catch {
    return new Response("invalid signature", { status: 400 });
  }
  // A retry carries the same webhook-id (= event.id): act once per id.
  if (event.type === "reminder.due") {
    await sendReminder(event.data.user_id, event.data.task.title, event.data.late ?? false);
  }
  return new Response(null, { status: 204 });
}

async function sendReminder(userId: string, title: string, late: boolean): Promise<void> {
  // Your e-mail or push notification here.
  console.log(`remind ${userId}: ${title}${late ? " (late)" : ""}`);
}
