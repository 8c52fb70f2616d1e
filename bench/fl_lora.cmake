# bench-fl-lora: federated LoRA of shoal-gpt, FedIT against HetLoRA against full fine-tuning.
add_executable(bench-fl-lora ${CMAKE_CURRENT_LIST_DIR}/fl_lora.cc)
target_compile_definitions(bench-fl-lora PRIVATE SHOAL_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
