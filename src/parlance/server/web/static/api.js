// The server's HTTP APIs as the page uses them: every request carries the API key the
// person gave (kept in this browser only), and a 401 asks for one and tries again.

const KEY = "parlance.apiKey";

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

let asking = null; // one key prompt at a time, whoever hit the 401 first

function askForKey() {
  if (asking) return asking;
  const dialog = document.getElementById("key-dialog");
  const input = document.getElementById("key");
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
    const response = await fetch(path, { ...options, headers });
    if (response.status !== 401) {
      if (!response.ok) throw new ApiError(response.status, await errorMessage(response));
      return response;
    }
    await askForKey();
  }
}

export async function json(path, options) {
  return (await api(path, options)).json();
}

export function postJSON(path, body, signal, headers = {}) {
  return api(path, {
    method: "POST", signal, body: JSON.stringify(body),
    headers: { "Content-Type": "application/json", ...headers },
  });
}

async function errorMessage(response) {
  const text = await response.text();
  try {
    const body = JSON.parse(text);
    const error = body.error;
    return (typeof error === "string" ? error : error && error.message) || text;
  } catch {
    return text || `HTTP ${response.status}`;
  }
}

/** The events of a server-sent event stream: {event, data} with data parsed as JSON. */
export async function* serverEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
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
