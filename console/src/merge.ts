// A three-way merge of texts by lines: the changes theirs and mine each made to the base they
// both started from, found with jsdiff's array diff, are kept together where they do not
// overlap; where they do (the same base lines changed differently, or different lines put at the
// same place) the merge asks. Nothing of either side is dropped without a person choosing it.

import { diffArrays } from "diff";

/** One side's change to the base: base lines [start, end) replaced by ``lines``. */
interface Hunk {
  side: "theirs" | "mine";
  start: number;
  end: number;
  lines: string[];
}

/** A stretch of the result: agreed lines, or an overlap with each side's version of it. */
export type Block =
  | { kind: "agreed"; lines: string[] }
  | { kind: "overlap"; base: string[]; theirs: string[]; mine: string[] };

/** How an overlap is settled: one side's lines, or both (theirs first). */
export type Choice = "theirs" | "mine" | "both";

export function splitLines(text: string): string[] {
  return text.split("\n");
}

function hunks(base: string[], other: string[], side: Hunk["side"]): Hunk[] {
  const found: Hunk[] = [];
  let at = 0;
  let open: Hunk | null = null;
  for (const change of diffArrays(base, other)) {
    if (!change.added && !change.removed) {
      if (open) found.push(open);
      open = null;
      at += change.count ?? change.value.length;
      continue;
    }
    open ??= { side, start: at, end: at, lines: [] };
    if (change.removed) {
      at += change.value.length;
      open.end = at;
    } else {
      open.lines.push(...change.value);
    }
  }
  if (open) found.push(open);
  return found;
}

/** The base's lines [start, end) with one side's hunks (all inside that range) applied. */
function applied(base: string[], start: number, end: number, side: Hunk[]): string[] {
  const out: string[] = [];
  let at = start;
  for (const h of side) {
    out.push(...base.slice(at, h.start), ...h.lines);
    at = h.end;
  }
  out.push(...base.slice(at, end));
  return out;
}

function same(a: string[], b: string[]): boolean {
  return a.length === b.length && a.every((line, i) => line === b[i]);
}

/** The merge of ``theirs`` and ``mine``, both edited from ``base``, as blocks in order. Two
 * changes overlap when they replace a common base line, or both start at the same base line
 * (two insertions at one place have no order a machine can choose). Identical changes on both
 * sides are agreed. */
export function merge3(base: string, theirs: string, mine: string): Block[] {
  const lines = splitLines(base);
  const all = [...hunks(lines, splitLines(theirs), "theirs"), ...hunks(lines, splitLines(mine), "mine")].sort(
    (a, b) => a.start - b.start || a.end - b.end,
  );
  const blocks: Block[] = [];
  const agreed = (more: string[]): void => {
    const last = blocks[blocks.length - 1];
    if (last?.kind === "agreed") last.lines.push(...more);
    else if (more.length) blocks.push({ kind: "agreed", lines: [...more] });
  };
  let at = 0;
  let i = 0;
  while (i < all.length) {
    const group = [all[i]];
    const starts = new Set([all[i].start]);
    let end = all[i].end;
    for (i += 1; i < all.length && (all[i].start < end || starts.has(all[i].start)); i += 1) {
      group.push(all[i]);
      starts.add(all[i].start);
      end = Math.max(end, all[i].end);
    }
    const start = group[0].start;
    agreed(lines.slice(at, start));
    at = end;
    const ours = group.filter((h) => h.side === "mine");
    const theirsHunks = group.filter((h) => h.side === "theirs");
    const mineLines = applied(lines, start, end, ours);
    const theirLines = applied(lines, start, end, theirsHunks);
    if (!ours.length) agreed(theirLines);
    else if (!theirsHunks.length || same(mineLines, theirLines)) agreed(mineLines);
    else blocks.push({ kind: "overlap", base: lines.slice(start, end), theirs: theirLines, mine: mineLines });
  }
  agreed(lines.slice(at));
  return blocks;
}

/** The merged text once every overlap has a choice (``choices[n]`` for the n-th overlap). */
export function mergedText(blocks: Block[], choices: (Choice | undefined)[]): string | null {
  const out: string[] = [];
  let n = 0;
  for (const block of blocks) {
    if (block.kind === "agreed") {
      out.push(...block.lines);
      continue;
    }
    const choice = choices[n++];
    if (!choice) return null;
    if (choice !== "mine") out.push(...block.theirs);
    if (choice !== "theirs") out.push(...block.mine);
  }
  return out.join("\n");
}
