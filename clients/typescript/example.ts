// The typed client in use: every path, parameter and body below is checked against
// schema.d.ts by `tsc --strict --noEmit` (tests/test_typescript_client.py).
import createClient, { type Middleware } from "openapi-fetch";
import type { components, paths } from "./schema";

export type Task = components["schemas"]["TaskPublic"];
export type ChatResponse = components["schemas"]["ChatResponse"];

export function todoAgent(baseUrl: string, getToken: () => Promise<string>) {
  const client = createClient<paths>({ baseUrl });
  const auth: Middleware = {
    async onRequest({ request }) {
      request.headers.set("Authorization", `Bearer ${await getToken()}`);
      return request;
    },
  };
  client.use(auth);
  return client;
}

export async function tour(baseUrl: string, userId: string, getToken: () => Promise<string>) {
  const api = todoAgent(baseUrl, getToken);
  const user = { path: { user_id: userId } };

  const created = await api.POST("/api/{user_id}/tasks", {
    params: user,
    body: { title: "Buy groceries", priority: "high", tags: ["home"], due_at: "2026-12-01" },
  });
  if (created.error) throw new Error(`could not add the task: ${JSON.stringify(created.error)}`);
  const task: Task = created.data;

  await api.PATCH("/api/{user_id}/tasks/{task_id}/complete", {
    params: { path: { user_id: userId, task_id: String(task.number) } },
    body: { completed: true },
  });
  const pending = await api.GET("/api/{user_id}/tasks", {
    params: { ...user, query: { status: "pending", limit: 10 } },
  });
  const titles: string[] = (pending.data?.data ?? []).map((t) => t.title);

  const answer = await api.POST("/api/{user_id}/chat", {
    params: user,
    body: { message: "What's pending?", timezone: "Europe/Berlin" },
  });
  const reply: ChatResponse | undefined = answer.data;

  const sessions = await api.GET("/api/{user_id}/sessions", {
    params: { ...user, query: { limit: 20 } },
  });
  const latest = sessions.data?.data[0];
  if (latest === undefined) return { titles, reply, history: [] };
  const history = await api.GET("/api/{user_id}/sessions/{session_id}/messages", {
    params: { path: { user_id: userId, session_id: latest.id }, query: { format: "ui" } },
  });
  return { titles, reply, history: history.data };
}
