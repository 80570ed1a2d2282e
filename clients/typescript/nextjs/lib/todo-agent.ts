import { DefaultChatTransport, type UIMessage } from "ai";
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

/** useChat's transport: todo-agent speaks the AI SDK's UI message stream protocol. */
export function chatTransport(userId: string) {
  return new DefaultChatTransport<UIMessage>({
    api: `${TODO_AGENT_URL}/api/${encodeURIComponent(userId)}/chat/ui`,
    headers: async () => ({ Authorization: `Bearer ${await todoAgentToken()}` }),
    // The service keeps the conversation itself: send only the newest message.
    prepareSendMessagesRequest: ({ id, messages, trigger, messageId }) => ({
      body: {
        id,
        messages: messages.slice(-1),
        trigger,
        messageId,
        timezone: Intl.DateTimeFormat().resolvedOptions().timeZone,
      },
    }),
  });
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
