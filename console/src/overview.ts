// Pictures of a tenant: small charts (uPlot, bundled) of its own figures — GetTenantFigures: the
// last hour per minute, counted in memory by the member that owns it, and its memories over its
// life — and, for an admin, the tenants three ways (ListTenantFigures: the largest, the busiest,
// those with failures; no tenant file opened for it). Each chart has its numbers
// in a table beside it, for a screen reader and for copying.

import uPlot from "uplot";
import { type Json, get, tenantPath } from "./api.js";
import { el, errorBox, replace, timeEl } from "./dom.js";

const ACCENT = "#1f5fa8";
const SECOND = "#b35c00";
const BAD = "#a8261f";

interface Series {
  label: string;
  values: (number | null)[];
  color: string;
}

/** A chart of ``series`` over ``times`` (unix seconds) in a figure, with its numbers. */
function chart(id: string, title: string, times: number[], series: Series[], unit: (v: number) => string = String): HTMLElement {
  const points = series.reduce((n, s) => n + s.values.filter((v) => v !== null).length, 0);
  const plot = el("div", { class: "plot", role: "img", "aria-label": `${title}: chart of ${points} points; the numbers follow` });
  const table = el(
    "table",
    { class: "numbers" },
    el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "time"), ...series.map((s) => el("th", { scope: "col" }, s.label)))),
    el(
      "tbody",
      {},
      ...times
        .map((t, i) => [t, i] as const)
        .filter(([, i]) => series.some((s) => s.values[i] !== null && s.values[i] !== 0))
        .map(([t, i]) =>
          el("tr", {}, el("td", {}, timeEl(new Date(t * 1000).toISOString())), ...series.map((s) => el("td", {}, s.values[i] === null ? "" : unit(s.values[i] as number)))),
        ),
    ),
  );
  const figure = el(
    "figure",
    { class: "chart", id, "data-points": String(points) },
    el("figcaption", {}, title, " ", el("span", { class: "meta" }, series.map((s) => s.label).join(", "))),
    plot,
    el("details", {}, el("summary", {}, "The numbers"), table),
  );
  // Drawn once the figure is in the page (uPlot measures its container).
  requestAnimationFrame(() => {
    const width = Math.max(240, Math.min(plot.clientWidth || 420, 640));
    new uPlot(
      {
        width,
        height: 160,
        legend: { show: false },
        cursor: { show: false },
        scales: { x: { time: true } },
        axes: [{ stroke: "#5b6673", grid: { stroke: "#eef1f4" } }, { stroke: "#5b6673", grid: { stroke: "#eef1f4" }, values: (_u, ticks) => ticks.map(unit), size: 60 }],
        series: [{}, ...series.map((s) => ({ label: s.label, stroke: s.color, width: 2, spanGaps: true, points: { show: true, size: 4, fill: s.color } }))],
      },
      [times, ...series.map((s) => s.values)] as uPlot.AlignedData,
      plot,
    );
  });
  return figure;
}

function seconds(stamp: string | undefined): number {
  return stamp ? Date.parse(stamp) / 1000 : 0;
}

function num(value: unknown): number {
  return Number(value ?? 0);
}

function gauge(value: unknown): number | null {
  return value === undefined || value === null ? null : Number(value);
}

function bytes(value: number): string {
  if (value >= 1 << 30) return `${(value / (1 << 30)).toFixed(1)} GiB`;
  if (value >= 1 << 20) return `${(value / (1 << 20)).toFixed(1)} MiB`;
  return `${Math.round(value / 1024)} KiB`;
}

export async function overviewView(tenant: string, main: HTMLElement): Promise<void> {
  const charts = el("div", { id: "charts", class: "charts" }, "Loading…");
  replace(main, el("h1", {}, "Overview"), charts);
  try {
    const f = await get(tenantPath(tenant, "/figures"));
    const minutes = (f.minutes ?? []) as Json[];
    const times = minutes.map((m) => seconds(m.start));
    const memories = (f.memories ?? []) as Json[];
    replace(
      charts,
      el(
        "dl",
        { class: "facts", id: "figures-now" },
        el("dt", {}, "files"),
        el("dd", {}, bytes(num(f.fileBytes))),
        el("dt", {}, "open fast writes"),
        el("dd", {}, String(num(f.hotPathDepth))),
        el("dt", {}, "oldest pending"),
        el("dd", {}, `${num(f.oldestPendingSeconds).toFixed(1)} s`),
        el("dt", {}, "counted since"),
        el("dd", {}, timeEl(f.countingSince), " (this server's start: the last hour is kept in its memory only)"),
      ),
      el(
        "div",
        { class: "chart-grid" },
        memories.length
          ? chart("chart-memories", "Memories over time", memories.map((m) => seconds(m.at)), [{ label: "live memories", values: memories.map((m) => num(m.memories)), color: ACCENT }])
          : el("p", { id: "chart-memories" }, "No memories yet."),
        chart("chart-traffic", "Writes and recalls per minute", times, [
          { label: "writes", values: minutes.map((m) => num(m.writes)), color: ACCENT },
          { label: "recalls", values: minutes.map((m) => num(m.recalls)), color: SECOND },
        ]),
        chart("chart-depth", "Hot-path depth", times, [{ label: "open fast writes", values: minutes.map((m) => gauge(m.hotPathDepth)), color: ACCENT }]),
        chart("chart-pending", "Oldest pending fast write", times, [{ label: "age", values: minutes.map((m) => gauge(m.oldestPendingSeconds)), color: SECOND }], (v) => `${v.toFixed(1)} s`),
        chart("chart-failed", "Failed fast writes per minute", times, [{ label: "failed", values: minutes.map((m) => num(m.failedEvents)), color: BAD }]),
        chart("chart-size", "File size", times, [{ label: "files", values: minutes.map((m) => gauge(m.fileBytes)), color: ACCENT }], bytes),
      ),
    );
  } catch (error) {
    replace(charts, errorBox(error));
  }
}

/** The admin's view across the tenants (of every member of a deployment): three tables. */
export async function acrossTenants(target: HTMLElement, open: (tenant: string) => void): Promise<void> {
  try {
    const f = await get("/v1/figures", { limit: 10 });
    const table = (id: string, title: string, rows: Json[], empty: string): HTMLElement =>
      el(
        "section",
        { class: "across", id, "aria-label": title },
        el("h3", {}, title),
        rows.length
          ? el(
              "table",
              {},
              el("thead", {}, el("tr", {}, ...["tenant", "files", "writes (hour)", "recalls (hour)", "failed (hour)"].map((h) => el("th", { scope: "col" }, h)))),
              el(
                "tbody",
                {},
                ...rows.map((r) =>
                  el(
                    "tr",
                    { "data-tenant": r.tenant },
                    el("td", {}, el("button", { type: "button", class: "link", onclick: () => open(r.tenant) }, r.tenant)),
                    el("td", { class: "nowrap" }, bytes(num(r.fileBytes))),
                    el("td", {}, String(num(r.writes))),
                    el("td", {}, String(num(r.recalls))),
                    el("td", {}, String(num(r.failedEvents))),
                  ),
                ),
              ),
            )
          : el("p", {}, empty),
      );
    const largest = (f.largest ?? []) as Json[];
    const busiest = (f.busiest ?? []) as Json[];
    replace(
      target,
      el("h2", {}, `Across the ${num(f.tenants)} tenants`),
      el("p", { class: "note" }, "From the counters kept in memory since ", timeEl(f.countingSince), " and the size of each file: no tenant file is opened."),
      (f.unansweredMembers ?? []).length
        ? el("p", { class: "error", role: "alert" }, `These members did not answer, so their tenants are missing: ${(f.unansweredMembers as string[]).join(", ")}.`)
        : null,
      el(
        "div",
        { class: "chart-grid" },
        table("largest", "The largest", largest, "No tenants."),
        table("busiest", "The busiest in the last hour", busiest, "No writes or recalls in the last hour."),
        table("failing", "With failed fast writes in the last hour", (f.failing ?? []) as Json[], "None failed in the last hour."),
      ),
    );
  } catch (error) {
    replace(target, errorBox(error));
  }
}
