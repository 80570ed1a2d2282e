"use client";

import { useChat } from "@ai-sdk/react";
import { getToolName, isToolUIPart, type UIMessage } from "ai";
import { useMemo, useState } from "react";
import { chatTransport } from "../lib/chat-transport";
import { TODO_AGENT_URL, todoAgentToken } from "../lib/todo-agent";

/** A chat with todo-agent. Pass a past session's id and `loadSession(...)` to continue it. */
export function TodoChat(props: { userId: string; chatId?: string; initialMessages?: UIMessage[] }) {
  const transport = useMemo(
    () => chatTransport(TODO_AGENT_URL, props.userId, todoAgentToken),
    [props.userId],
  );
  const { messages, sendMessage, regenerate, status, error } = useChat({
    id: props.chatId,
    messages: props.initialMessages,
    transport,
  });
  const [input, setInput] = useState("");

  return (
    <div>
      {messages.map((message) => (
        <div key={message.id} className={message.role}>
          {message.parts.map((part, index) => {
            if (part.type === "text") return <p key={index}>{part.text}</p>;
            if (!isToolUIPart(part)) return null;
            const tool = getToolName(part);
            if (part.state === "output-available") {
              return <pre key={index}>{tool}: {JSON.stringify(part.output, null, 2)}</pre>;
            }
            if (part.state === "output-error") {
              return <p key={index}>{tool} failed: {part.errorText}</p>;
            }
            return <p key={index}>{tool}…</p>;
          })}
        </div>
      ))}
      {error && (
        <p role="alert">
          Something went wrong. <button onClick={() => regenerate()}>Try again</button>
        </p>
      )}
      <form
        onSubmit={(event) => {
          event.preventDefault();
          if (!input.trim()) return;
          void sendMessage({ text: input });
          setInput("");
        }}
      >
        <input
          value={input}
          onChange={(event) => setInput(event.target.value)}
          disabled={status === "submitted" || status === "streaming"}
          placeholder="Add a task to buy milk"
        />
      </form>
    </div>
  );
}
