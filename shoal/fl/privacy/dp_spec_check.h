// Deploy-time checks of spec.privacy.dp against the rest of the job (the manifest parser checks
// each field's range; these also guard specs that arrive as JSON, e.g. a cluster's job record).
#pragma once

#include "shoal/common/status.h"
#include "shoal/interfaces/fljob_spec.h"

namespace shoal::privacy {

// kInvalidArgument naming the field: an asynchronous algorithm (the clip is taken on each
// update's change from the one model version a synchronous round shares), a robust rule beside
// DP (its sensitivity is not the clipped mean's), a field out of range, adaptive clipping whose
// count noise leaves no noise for the update (2 σ_b <= σ).
Status CheckDpSpec(const FlJobSpec& spec, bool synchronous);

// The count's σ_b the job uses (the spec's, or expected clients / 20).
double CountNoiseMultiplier(const FlJobSpec& spec);

}  // namespace shoal::privacy
