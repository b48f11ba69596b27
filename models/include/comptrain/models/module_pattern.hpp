#pragma once
// Module path patterns: which saved tensors of a trace a strategy rule selects by the module
// they belong to (TensorSelector::modules; models/strategies/README.md, "Module patterns").
//
// A pattern is a dot-separated path of components, matched component by component against a
// tensor's name (which in the zoo and in captured traces is its module path plus a suffix:
// `model.layers.3.mlp.down_proj.out`). A component is
//   - `[a-b]`: a numeric range, matching a component of decimal digits whose value lies in
//     a..b inclusive (`[0-15]` matches `0` to `15`, not the character class fnmatch would read);
//   - `**`: any number of components, none included;
//   - anything else: a shell pattern within one component (fnmatch(3): `*` any characters but
//     a dot, `?` one character), a plain name matching itself.
// The pattern names a module anywhere along the path, and the module's whole subtree: it
// matches a name when its components match consecutive components of the name, starting at
// any component, whatever follows. So `mlp` matches every tensor of every `...mlp...` module,
// `layers.*.mlp` those of each layer's MLP, `layers.[0-15]` everything of layers 0 to 15 and
// `model.layers.3` layer 3 of a Hugging Face LLaMA only.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace comptrain::models {

// Throws InputError (message: `pattern '<text>': <what is wrong>; <what is expected>`) when the
// pattern is empty, has an empty component, a bracket that is not a whole-component range
// `[a-b]` of decimal numbers with a <= b, or a `**` inside a component.
void validate_module_pattern(std::string_view pattern);

// The dot-separated components of a name or pattern ("model.layers.3" -> model, layers, 3; an
// empty text or a doubled dot gives empty components), viewing `text`.
std::vector<std::string_view> path_components(std::string_view text);

// Whether `name` lies in a module `pattern` (validated) names.
bool module_pattern_matches(std::string_view pattern, std::string_view name);

// The module instance `name` lies in: the leading components of `name` up to the end of the
// pattern's first match (leftmost start, `**` as short as possible), or nothing when it does not
// match. `layers.*` on `model.layers.3.mlp.down_proj.out` gives `model.layers.3`, and on
// `model.layers.3.mlp.down_proj.backward` the same: the unit a selective checkpoint region or an
// FSDP parameter group is made of.
std::optional<std::string_view> module_pattern_instance(std::string_view pattern, std::string_view name);

}  // namespace comptrain::models
