-- The sandbox's string.rep (doubling copies) against repetition by concatenation, and patterns that
-- stay within the cost bound still work.
for _, s in ipairs { "", "a", "ab", "xyz\0q" } do
  for _, sep in ipairs { "", ",", "--" } do
    for n = -1, 9 do
      local r = ""
      for i = 1, n do r = r .. s .. (i < n and sep or "") end
      assert(s:rep(n, sep) == r, ("rep %q %d %q"):format(s, n, sep))
      if sep == "" then assert(s:rep(n) == r) end
    end
  end
end
local big = ("ab"):rep(100000, "c")
assert(#big == 2 * 100000 + 99999 and big:sub(1, 7) == "abcabca" and big:sub(-4) == "bcab")
assert(("blk.3.attn.weight"):match("^blk%.(%d+)%.(.+)$") == "3")
assert(select(2, ("aXbXc"):gsub("X", "-")) == 2 and ("a.b"):find(".", 1, true) == 2)
assert(getmetatable(glm.input("pos")) == "glm.tensor")
local emb = glm.param("model.embed_tokens.weight", { 512, 64 })
glm.output("logits", glm.embedding(emb, glm.input("tokens")))
