// Sign-in. `GET /workbench/config.json` says how (app/api/workbench.py):
//   "supabase": Supabase Auth in the browser (email + password, or a magic link) through the
//               vendored @supabase/supabase-js bundle, loaded only in this mode; the session's
//               access token is the bearer token, and it follows every refresh.
//   "dev":      a local `serve` with a generated secret hands the page a dev token.
//   "token":    the user pastes a bearer token (kept in sessionStorage: this tab only).
import { setToken } from "./api.js";
import { el } from "./dom.js";

const KEY = "agent-runtime.token";
const SUPABASE_BUNDLE = "/workbench/vendor/supabase-js/supabase.js";

export async function signIn(container) {
  const config = await (await fetch("/workbench/config.json")).json();
  if (config.auth === "supabase") return supabaseSignIn(container, config);
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
    showSignedIn(container, "signed in with a token", () => {
      sessionStorage.removeItem(KEY);
      location.reload();
    });
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
      showSignedIn(container, "signed in with a token", () => {
        sessionStorage.removeItem(KEY);
        location.reload();
      });
      resolve(true);
    });
    container.replaceChildren(form);
    input.focus();
  });
}

function showSignedIn(container, text, signOut) {
  const out = document.createElement("button");
  out.type = "button";
  out.textContent = "Sign out";
  out.addEventListener("click", signOut);
  const who = document.createElement("span");
  who.className = "signed-in-as";
  who.textContent = `${text} `;
  container.replaceChildren(who, out);
}

// ------------------------------------------------------------------ Supabase Auth

/** Load the UMD bundle with a <script> tag (it defines the global `supabase`). */
function loadSupabase() {
  if (window.supabase?.createClient) return Promise.resolve(window.supabase);
  return new Promise((resolve, reject) => {
    const script = document.createElement("script");
    script.src = SUPABASE_BUNDLE;
    script.onload = () => resolve(window.supabase);
    script.onerror = () => reject(new Error(`cannot load ${SUPABASE_BUNDLE}`));
    document.head.appendChild(script);
  });
}

async function supabaseSignIn(container, config) {
  const sb = await loadSupabase();
  const client = sb.createClient(config.supabaseUrl, config.supabaseAnonKey, {
    auth: { persistSession: true, autoRefreshToken: true, detectSessionInUrl: true },
  });
  let shown = false;
  const show = (session) => {
    shown = true;
    const who = session.user?.email || session.user?.id || "a Supabase user";
    showSignedIn(container, `signed in as ${who}`, async () => {
      const { error } = await client.auth.signOut();  // success: SIGNED_OUT reloads the page
      if (error) container.prepend(`Sign-out failed: ${error.message}. `);
    });
  };
  // Every new or refreshed session replaces the bearer token the API calls use. (Only
  // synchronous work here: supabase-js holds a lock while it runs these callbacks.)
  client.auth.onAuthStateChange((event, session) => {
    if (session?.access_token) setToken(session.access_token);
    // signed out here, in another tab (supabase-js tells them all), or the refresh token was
    // refused: back to the sign-in card
    if (event === "SIGNED_OUT") {
      setToken(null);
      location.reload();
    }
  });
  const { data } = await client.auth.getSession();
  if (data.session) {
    setToken(data.session.access_token);
    show(data.session);
    return true;
  }
  container.textContent = "not signed in";
  // the card is modal: the page behind it is out of reach (keyboard, screen readers) meanwhile
  const behind = [document.querySelector(".topbar"), document.getElementById("app")];
  for (const node of behind) node.inert = true;
  return new Promise((resolve) => {
    const card = supabaseForm(client, (session) => {
      setToken(session.access_token);
      card.remove();
      for (const node of behind) node.inert = false;
      if (!shown) show(session);
      resolve(true);
    });
    document.body.appendChild(card);
    card.querySelector("input").focus();
  });
}

function field(labelText, attrs) {
  const input = document.createElement("input");
  Object.assign(input, attrs);
  input.id = `signin-${attrs.name}`;
  const text = document.createElement("label");
  text.htmlFor = input.id;
  text.textContent = labelText;
  const label = document.createElement("div");
  label.className = "field";
  label.append(text, input);
  return { label, input };
}

/** The sign-in card: email + password, or a magic link by email. */
function supabaseForm(client, onSession) {
  const card = el("section", {
    class: "signin-card", role: "dialog", "aria-modal": "true", "aria-labelledby": "signin-title",
  });
  const title = el("h2", { id: "signin-title", text: "Sign in" });
  const hint = el("p", { class: "muted", text: "with your account of this project (Supabase Auth)" });
  const email = field("Email", { type: "email", name: "email", required: true, autocomplete: "username" });
  const password = field("Password", {
    type: "password", name: "password", autocomplete: "current-password",
  });
  const status = el("p", { class: "signin-status", role: "status" });
  const submit = el("button", { type: "submit", text: "Sign in" });
  const magic = el("button", { type: "button", text: "Email me a sign-in link" });
  const form = el("form", {}, email.label, password.label,
                  el("div", { class: "signin-actions" }, submit, magic), status);

  const report = (text, kind) => {
    status.textContent = text;
    status.className = `signin-status ${kind || ""}`;
    status.setAttribute("role", kind === "error" ? "alert" : "status");
  };
  const busy = (on) => {
    submit.disabled = magic.disabled = on;
  };
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    if (!password.input.value) {
      report("Enter your password, or ask for a sign-in link.", "error");
      password.input.focus();
      return;
    }
    busy(true);
    report("Signing in…");
    const { data, error } = await client.auth.signInWithPassword({
      email: email.input.value.trim(),
      password: password.input.value,
    });
    busy(false);
    if (error) {
      report(`Sign-in failed: ${error.message}`, "error");
      password.input.select();
      return;
    }
    onSession(data.session);
  });
  magic.addEventListener("click", async () => {
    if (!email.input.reportValidity()) return;
    busy(true);
    const { error } = await client.auth.signInWithOtp({
      email: email.input.value.trim(),
      options: { emailRedirectTo: `${location.origin}/`, shouldCreateUser: false },
    });
    busy(false);
    if (error) report(`Cannot send a link: ${error.message}`, "error");
    else report(`Check ${email.input.value.trim()} for a sign-in link.`, "ok");
  });
  card.append(title, hint, form);
  return card;
}
