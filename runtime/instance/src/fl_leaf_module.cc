// The fl-leaf built-in's module (builtin_module.h): its one exported symbol makes the leaf that
// shoald asks for (fl_leaf_handler.h).
#include "shoal/runtime/builtin_module.h"
#include "shoal/runtime/fl_leaf_handler.h"

SHOAL_BUILTIN_MODULE(shoal::CreateFlLeafHandler)
