import type { UIMessage } from "ai";
import createClient from "openapi-fetch";
import type { paths } from "../../schema"; // clients/typescript/schema.d.ts, copied into your app
import { authClient } from "./auth-client";

// Where todo-agent runs; its CORS_ORIGINS must list this app's origin.
export const TODO_AGENT_URL = "http://localhost:8000";

export async function todoAgentToken(): Promise<string> {
  const { data, error } = await authClient.token();
  if (error || !data) throw new Error("Sign in first.");
  return data.token;
}

/** The typed client for everything else (tasks, sessions), generated from /openapi.json. */
export const api = createClient<paths>({ baseUrl: TODO_AGENT_URL });
api.use({
  async onRequest({ request }) {
    request.headers.set("Authorization", `Bearer ${await todoAgentToken()}`);
    return request;
  },
});

/** A past session as useChat's initial messages, exactly as it was streamed. */
export async function loadSession(userId: string, sessionId: string): Promise<UIMessage[]> {
  const { data, error } = await api.GET("/api/{user_id}/sessions/{session_id}/messages", {
    params: { path: { user_id: userId, session_id: sessionId }, query: { format: "ui" } },
  });
  if (error) throw new Error(`Could not load the session: ${JSON.stringify(error)}`);
  return Array.isArray(data) ? (data as UIMessage[]) : [];
}
