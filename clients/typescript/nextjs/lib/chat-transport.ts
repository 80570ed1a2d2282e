import { DefaultChatTransport, type UIMessage } from "ai";

/** useChat's transport: todo-agent speaks the AI SDK's UI message stream protocol. */
export function chatTransport(baseUrl: string, userId: string, getToken: () => Promise<string>) {
  return new DefaultChatTransport<UIMessage>({
    api: `${baseUrl}/api/${encodeURIComponent(userId)}/chat/ui`,
    headers: async () => ({ Authorization: `Bearer ${await getToken()}` }),
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
