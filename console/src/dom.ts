// Building the page: every piece of text from the server becomes a text node (createTextNode /
// textContent), never parsed as HTML — agents retain web content, and it is hostile.

import { explain } from "./api.js";

export type Child = Node | string | number | null | undefined | false;
export type Attrs = Record<string, string | boolean | ((event: Event) => void)>;

export function el(tag: string, attrs: Attrs = {}, ...children: Child[]): HTMLElement {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (typeof value === "function") node.addEventListener(key.replace(/^on/, ""), value);
    else if (value === true) node.setAttribute(key, "");
    else if (value !== false) node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function button(label: string, onClick: () => void, attrs: Attrs = {}): HTMLElement {
  return el("button", { type: "button", ...attrs, onclick: () => onClick() }, label);
}

/** A button that sends a request: a click while its request is still out does nothing, so a
 * double click saves, forgets or reverts once (a second save would meet the first's generation
 * and show it as someone else's). */
export function sendButton(label: string, send: () => Promise<void>, attrs: Attrs = {}): HTMLElement {
  let sending = false;
  return button(
    label,
    () => {
      if (sending) return;
      sending = true;
      void send().finally(() => {
        sending = false;
      });
    },
    attrs,
  );
}

export function errorBox(error: unknown, id = ""): HTMLElement {
  return el("p", { class: "error", role: "alert", ...(id ? { id } : {}) }, explain(error));
}

export function replace(target: Element, ...children: Child[]): void {
  target.replaceChildren(...children.filter((c): c is Node | string | number => c !== null && c !== undefined && c !== false).map((c) => (c instanceof Node ? c : document.createTextNode(String(c)))));
}

export function when(stamp: string | undefined): string {
  return stamp ? new Date(stamp).toLocaleString() : "";
}

/** A time as a <time> element: its text in the reader's locale, the instant in ``datetime``. */
export function timeEl(stamp: string | undefined): HTMLElement {
  return el("time", stamp ? { datetime: stamp } : {}, when(stamp));
}
