// The three-way merge (src/merge.ts), bundled with esbuild in memory and run by node's test
// runner: `node --test tests/` in console/ (tests/test_console.py runs it).
import assert from "node:assert/strict";
import { test } from "node:test";
import { build } from "esbuild";

const bundle = await build({ entryPoints: [new URL("../src/merge.ts", import.meta.url).pathname], bundle: true, format: "esm", write: false });
const { merge3, mergedText } = await import(`data:text/javascript;base64,${Buffer.from(bundle.outputFiles[0].text).toString("base64")}`);

const base = "# Memory\n- one\n- two\n- three\n- four\n- five";

function overlaps(blocks) {
  return blocks.filter((b) => b.kind === "overlap");
}

test("changes to different lines are both kept, in place", () => {
  const theirs = base.replace("- two", "- two (theirs)");
  const mine = base.replace("- four", "- four (mine)");
  const blocks = merge3(base, theirs, mine);
  assert.deepEqual(overlaps(blocks), []);
  assert.equal(mergedText(blocks, []), "# Memory\n- one\n- two (theirs)\n- three\n- four (mine)\n- five");
});

test("adjacent lines changed by each side do not overlap", () => {
  const theirs = base.replace("- two", "- 2");
  const mine = base.replace("- three", "- 3");
  assert.equal(mergedText(merge3(base, theirs, mine), []), "# Memory\n- one\n- 2\n- 3\n- four\n- five");
});

test("lines added at both ends and a deletion in the middle merge", () => {
  const theirs = `top (theirs)\n${base}`;
  const mine = `${base.replace("- three\n", "")}\n- six (mine)`;
  assert.equal(mergedText(merge3(base, theirs, mine), []), "top (theirs)\n# Memory\n- one\n- two\n- four\n- five\n- six (mine)");
});

test("the same line changed differently is an overlap that asks", () => {
  const theirs = base.replace("- three", "- three (theirs)");
  const mine = base.replace("- three", "- three (mine)").replace("- five", "- five (mine)");
  const blocks = merge3(base, theirs, mine);
  assert.deepEqual(overlaps(blocks), [{ kind: "overlap", base: ["- three"], theirs: ["- three (theirs)"], mine: ["- three (mine)"] }]);
  assert.equal(mergedText(blocks, []), null, "no text until the overlap is settled");
  assert.equal(mergedText(blocks, ["theirs"]), base.replace("- three", "- three (theirs)").replace("- five", "- five (mine)"));
  assert.equal(mergedText(blocks, ["mine"]), mine);
  assert.equal(mergedText(blocks, ["both"]), base.replace("- three", "- three (theirs)\n- three (mine)").replace("- five", "- five (mine)"));
});

test("two insertions at the same place overlap; identical changes agree", () => {
  assert.equal(overlaps(merge3(base, `${base}\n- theirs`, `${base}\n- mine`)).length, 1);
  const both = base.replace("- one", "- uno");
  assert.deepEqual(merge3(base, both, both), [{ kind: "agreed", lines: both.split("\n") }]);
});

test("one side's change inside a range the other side deleted overlaps", () => {
  const theirs = base.replace("- two\n- three\n- four\n", "");
  const mine = base.replace("- three", "- three (mine)");
  const [overlap] = overlaps(merge3(base, theirs, mine));
  assert.deepEqual(overlap.theirs, []);
  assert.deepEqual(overlap.mine, ["- two", "- three (mine)", "- four"]);
});

test("an unchanged side takes the other's text exactly", () => {
  for (const other of ["", "x", `${base}\n`, "completely\ndifferent"]) {
    assert.equal(mergedText(merge3(base, base, other), []), other);
    assert.equal(mergedText(merge3(base, other, base), []), other);
  }
});
