import { useEffect } from "react";
import type { components } from "../../schema";
import { TODO_AGENT_URL, todoAgentToken } from "./todo-agent";

type Task = components["schemas"]["TaskPublic"];

/** One event of GET /api/{user_id}/events: a CloudEvents 1.0 object. */
export interface TodoEvent {
  id: string;
  type: "task.created" | "task.updated" | "task.completed" | "task.reopened" | "task.deleted" | "reminder.due";
  time: string;
  subject: string;
  data: { user_id: string; task: Task; remind_at?: string; late?: boolean };
}

/** Follow the user's events while the component is mounted: fetch() can send the bearer
 * token (EventSource cannot); after a drop it resumes with Last-Event-ID, losing none. */
export function useTaskEvents(userId: string, onEvent: (event: TodoEvent) => void): void {
  useEffect(() => {
    const stop = new AbortController();
    let lastEventId: string | undefined;
    async function follow(): Promise<void> {
      while (!stop.signal.aborted) {
        try {
          const response = await fetch(`${TODO_AGENT_URL}/api/${userId}/events`, {
            headers: {
              Authorization: `Bearer ${await todoAgentToken()}`,
              ...(lastEventId ? { "Last-Event-ID": lastEventId } : {}),
            },
            signal: stop.signal,
          });
          if (!response.ok || !response.body) throw new Error(`events: ${response.status}`);
          const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
          let buffer = "";
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            buffer += value;
            let end: number;
            while ((end = buffer.indexOf("\n\n")) >= 0) {
              const block = buffer.slice(0, end);
              buffer = buffer.slice(end + 2);
              const id = /^id: (.*)$/m.exec(block)?.[1];
              const data = /^data: (.*)$/m.exec(block)?.[1];
              if (id && data) {
                lastEventId = id;
                onEvent(JSON.parse(data) as TodoEvent);
              }
            }
          }
        } catch {
          if (stop.signal.aborted) return;
        }
        await new Promise((resume) => setTimeout(resume, 1000));
      }
    }
    void follow();
    return () => stop.abort();
  }, [userId, onEvent]);
}
