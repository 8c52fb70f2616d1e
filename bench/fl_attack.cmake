# bench-fl-attack: accuracy under attack, rule x attack, through a real shoald and shoal-client.
add_executable(bench-fl-attack ${CMAKE_CURRENT_LIST_DIR}/fl_attack.cc)
target_link_libraries(bench-fl-attack PRIVATE shoal_test_support shoal_client
  nlohmann_json::nlohmann_json)
if(TARGET shoal-client)
  add_dependencies(bench-fl-attack shoal-client)
endif()
