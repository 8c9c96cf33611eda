// Sign-in. On a local `serve` with a generated secret the server hands the page a dev token
// (`POST /workbench/dev-token`, see app/api/workbench.py for when); otherwise the user pastes a
// token (kept in sessionStorage: this tab only). Supabase Auth comes later (WORKBENCH_STATUS.md).
import { setToken } from "./api.js";

const KEY = "agent-runtime.token";

export async function signIn(container) {
  const config = await (await fetch("/workbench/config.json")).json();
  if (config.auth === "dev") {
    const r = await fetch("/workbench/dev-token", { method: "POST" });
    if (r.ok) {
      const { token, user } = await r.json();
      setToken(token);
      container.textContent = `signed in as ${user} (local dev)`;
      return true;
    }
  }
  const saved = sessionStorage.getItem(KEY);
  if (saved) {
    setToken(saved);
    showSignedIn(container);
    return true;
  }
  return new Promise((resolve) => {
    const form = document.createElement("form");
    const label = document.createElement("label");
    label.textContent = "Token ";
    const input = document.createElement("input");
    input.type = "password";
    input.autocomplete = "off";
    input.placeholder = "paste a bearer token";
    label.appendChild(input);
    const button = document.createElement("button");
    button.textContent = "Sign in";
    form.append(label, button);
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      if (!input.value.trim()) return;
      sessionStorage.setItem(KEY, input.value.trim());
      setToken(input.value.trim());
      showSignedIn(container);
      resolve(true);
    });
    container.replaceChildren(form);
    input.focus();
  });
}

function showSignedIn(container) {
  const out = document.createElement("button");
  out.textContent = "Sign out";
  out.addEventListener("click", () => {
    sessionStorage.removeItem(KEY);
    location.reload();
  });
  container.replaceChildren("signed in with a token ", out);
}
