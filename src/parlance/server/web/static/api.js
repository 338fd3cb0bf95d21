// The server's HTTP APIs as the page uses them: every request carries the API key the
// person gave (kept in this browser only); a 401 asks for one (saying when the one
// given was refused) and tries again. Whether the server answers at all is tracked
// and shown (`connection`), so a stopped server reads as such, not "Failed to fetch".

const KEY = "parlance.apiKey";

export class ApiError extends Error {
  constructor(status, message, code = null) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** The server could not be reached at all (stopped, restarting, network down). */
export class Unreachable extends Error {
  constructor() {
    super("The server is not answering: is `parlance serve` still running?");
    this.name = "Unreachable";
  }
}

const listeners = new Set();
export const connection = {
  up: true,
  /** `listener(up)` is called whenever the server starts or stops answering. */
  watch(listener) { listeners.add(listener); },
  set(up) {
    if (up === this.up) return;
    this.up = up;
    for (const listener of listeners) listener(up);
  },
};

let asking = null; // one key prompt at a time, whoever hit the 401 first

function askForKey(refused) {
  if (asking) return asking;
  const dialog = document.getElementById("key-dialog");
  const input = document.getElementById("key");
  document.getElementById("key-refused").hidden = !refused;
  asking = new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      localStorage.setItem(KEY, input.value.trim());
      input.value = "";
      asking = null;
      resolve();
    }, { once: true });
    dialog.showModal();
    input.focus();
  });
  return asking;
}

/** fetch() with the key; a 401 asks for a key and retries once it is given. */
export async function api(path, options = {}) {
  for (;;) {
    const headers = new Headers(options.headers || {});
    const key = localStorage.getItem(KEY);
    if (key) headers.set("Authorization", `Bearer ${key}`);
    let response;
    try {
      response = await fetch(path, { ...options, headers });
    } catch (error) {
      if (error.name === "AbortError") throw error;
      connection.set(false);
      throw new Unreachable();
    }
    connection.set(true);
    if (response.status !== 401) {
      if (!response.ok) {
        const { message, code } = await errorOf(response);
        throw new ApiError(response.status, message, code);
      }
      return response;
    }
    await askForKey(Boolean(key));
  }
}

export async function json(path, options) {
  return (await api(path, options)).json();
}

export function sendJSON(method, path, body, signal, headers = {}) {
  return api(path, {
    method, signal, body: JSON.stringify(body),
    headers: { "Content-Type": "application/json", ...headers },
  });
}

export function postJSON(path, body, signal, headers = {}) {
  return sendJSON("POST", path, body, signal, headers);
}

async function errorOf(response) {
  const text = await response.text();
  try {
    const body = JSON.parse(text);
    const error = body.error;
    if (typeof error === "string") return { message: error, code: null };
    return { message: (error && error.message) || text, code: (error && error.code) || null };
  } catch {
    return { message: text || `HTTP ${response.status}`, code: null };
  }
}

/** The events of a server-sent event stream: {event, data} with data parsed as JSON. */
export async function* serverEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    let chunk;
    try {
      chunk = await reader.read();
    } catch (error) {
      if (error.name === "AbortError") throw error;
      connection.set(false);
      throw new Unreachable();
    }
    const { value, done } = chunk;
    if (done) return;
    buffer += value.replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length && data[0] !== "[DONE]") yield { event, data: JSON.parse(data.join("\n")) };
    }
  }
}
