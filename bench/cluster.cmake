# The cluster benchmarks: real clusters of network namespaces (tests/support/netns_cluster.h).
add_executable(bench-cluster-failover ${CMAKE_CURRENT_LIST_DIR}/cluster_failover.cc)
target_link_libraries(bench-cluster-failover PRIVATE shoal_test_support)
add_executable(bench-cluster-hop ${CMAKE_CURRENT_LIST_DIR}/cluster_hop.cc)
target_link_libraries(bench-cluster-hop PRIVATE shoal_test_support)
target_include_directories(bench-cluster-hop PRIVATE ${CMAKE_CURRENT_LIST_DIR})
add_executable(bench-cluster-round ${CMAKE_CURRENT_LIST_DIR}/cluster_round.cc)
target_link_libraries(bench-cluster-round PRIVATE shoal_test_support shoal_model shoal_proto)
target_include_directories(bench-cluster-round PRIVATE ${CMAKE_CURRENT_LIST_DIR})
