// Drives agent-runtime's chat routes with the published AI SDK client (the `ai` package), the
// way `useChat` does: a `Chat` (the SDK's `AbstractChat` with an in-memory state, as
// @ai-sdk/react's Chat is with React state) over a `DefaultChatTransport`.
//
//   node chat.mjs send   <baseUrl> <token> <chatId> <text>   → sendMessage({ text })
//   node chat.mjs resume <baseUrl> <token> <chatId>          → resumeStream()
//
// Prints one JSON object: { status, error, messages, data } — the chat's state at the end
// (`data`: every data part `onData` saw, transient ones included).
import { AbstractChat, DefaultChatTransport } from 'ai';

class MemoryState {
  constructor() {
    this.status = 'ready';
    this.error = undefined;
    this.messages = [];
  }
  pushMessage(message) { this.messages = this.messages.concat(message); }
  popMessage() { this.messages = this.messages.slice(0, -1); }
  replaceMessage(index, message) {
    this.messages = [...this.messages.slice(0, index), this.snapshot(message), ...this.messages.slice(index + 1)];
  }
  snapshot(value) { return structuredClone(value); }
}

class Chat extends AbstractChat {
  constructor(init) { super({ ...init, state: new MemoryState() }); }
}

const [mode, baseUrl, token, chatId, text] = process.argv.slice(2);
const data = [];
const errors = [];
const chat = new Chat({
  id: chatId,
  transport: new DefaultChatTransport({
    api: `${baseUrl}/api/agent-runtime/chat`,
    headers: { Authorization: `Bearer ${token}` },
  }),
  onData: (part) => data.push(part),
  onError: (error) => errors.push(String(error?.message ?? error)),
});

if (mode === 'send') {
  await chat.sendMessage({ text });
} else if (mode === 'resume') {
  await chat.resumeStream();
} else {
  throw new Error(`unknown mode ${mode}`);
}
process.stdout.write(JSON.stringify({
  status: chat.status,
  error: chat.error ? String(chat.error.message) : null,
  errors,
  messages: chat.messages,
  data,
}) + '\n');
